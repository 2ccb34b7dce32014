#!/usr/bin/env python3
"""Serving speed of each CPU backend against its framework's own in-process speed.

The same MLP (256 -> 1024 -> 1024 -> 10, the weights of the bundled `mlp`) as ONNX (ONNX Runtime backend),
TorchScript (PyTorch backend) and OpenVINO IR (OpenVINO backend), and an XGBoost classifier (200 trees of depth
6 on 32 features) through the FIL backend. Each model is served by modelhost with dynamic batching and one
instance, and loaded with wrk (C) over HTTP with binary tensors:

* `rows`: single-row requests at c = 1 / 8 / 64 in flight, which the dynamic batcher gathers into batches of
  up to c rows;
* `batch64`: requests of 64 rows each, at c = 1 / 4.

Against that, the framework's own in-process rows/s at batch 1 / 8 / 64, with the threads the server's instance
gets (modelhost's default budget: the cores but one, shared by a model's instances; 1 thread on 2 cores),
measured in this process while no server runs. The ratio served/in-process at batch 64 is the share of the
framework's speed that survives serving (HTTP, decoding, batching, the instance hand-off).

    .venv/bin/python benchmarks/backends.py                        # everything, ~6 minutes
    .venv/bin/python benchmarks/backends.py --backends onnx,fil --duration 3 --repeats 1
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "scripts"))

import loadgen  # noqa: E402
import make_examples  # noqa: E402
import payloads  # noqa: E402
from servers import Ports, Server, server_command  # noqa: E402

BACKENDS = ("onnx", "torch", "openvino", "fil")
MODEL_OF = {"onnx": "mlp_onnx", "torch": "mlp_torch", "openvino": "mlp_openvino", "fil": "trees_fil"}
TREES = {"features": 32, "rounds": 200, "depth": 6}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def threads_per_instance() -> int:
    from modelhost.backends.cpu_threads import default_intra_op_threads

    return int(default_intra_op_threads(1))


# ----------------------------------------------------------------------------------------------------------
# The repository
# ----------------------------------------------------------------------------------------------------------


def _config(name: str, head: str, inputs: str, outputs: str, max_batch: int, extra: str = "") -> str:
    return (
        f'name: "{name}"\n{head}\nmax_batch_size: {max_batch}\n'
        f"input [ {inputs} ]\noutput [ {outputs} ]\n"
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        "dynamic_batching { }\n" + extra
    )


def trees_data(rows: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, TREES["features"])).astype(np.float32)
    y = (x[:, 0] + x[:, 1] * x[:, 2] - np.abs(x[:, 3]) + 0.3 * rng.standard_normal(rows) > 0).astype(
        np.float32
    )
    return x, y


def build_repository(root: Path, backends: list[str]) -> None:
    mlp_in, mlp_out = make_examples.MLP_SIZES[0], make_examples.MLP_SIZES[-1]
    io_in = f'{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {mlp_in} ] }}'
    io_out = f'{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {mlp_out} ] }}'
    if "onnx" in backends:
        d = root / "mlp_onnx"
        (d / "1").mkdir(parents=True)
        (d / "1" / "model.onnx").write_bytes(make_examples.make_mlp().SerializeToString())
        (d / "config.pbtxt").write_text(
            _config("mlp_onnx", 'platform: "onnxruntime_onnx"', io_in, io_out, 64)
        )
    if "torch" in backends:
        d = root / "mlp_torch"
        (d / "1").mkdir(parents=True)
        (d / "1" / "model.pt").write_bytes(make_examples.torchscript_mlp())
        (d / "config.pbtxt").write_text(
            _config(
                "mlp_torch",
                'platform: "pytorch_libtorch"',
                io_in.replace("INPUT0", "INPUT__0"),
                io_out.replace("OUTPUT0", "OUTPUT__0"),
                64,
            )
        )
    if "openvino" in backends:
        d = root / "mlp_openvino"
        (d / "1").mkdir(parents=True)
        xml, weights = make_examples.openvino_mlp()
        (d / "1" / "model.xml").write_bytes(xml)
        (d / "1" / "model.bin").write_bytes(weights)
        (d / "config.pbtxt").write_text(_config("mlp_openvino", 'backend: "openvino"', io_in, io_out, 64))
    if "fil" in backends:
        import xgboost as xgb

        d = root / "trees_fil"
        (d / "1").mkdir(parents=True)
        x, y = trees_data(20_000)
        params = {"objective": "binary:logistic", "max_depth": TREES["depth"], "nthread": 2, "seed": 0}
        booster = xgb.train(params, xgb.DMatrix(x, label=y), num_boost_round=TREES["rounds"])
        booster.save_model(str(d / "1" / "xgboost.json"))
        parameters = "".join(
            f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n'
            for k, v in (("model_type", "xgboost_json"), ("is_classifier", "true"), ("predict_proba", "true"))
        )
        (d / "config.pbtxt").write_text(
            _config(
                "trees_fil",
                'backend: "fil"',
                f'{{ name: "input__0" data_type: TYPE_FP32 dims: [ {TREES["features"]} ] }}',
                '{ name: "output__0" data_type: TYPE_FP32 dims: [ 2 ] }',
                1024,
                parameters,
            )
        )


# ----------------------------------------------------------------------------------------------------------
# In-process runners: one callable per backend that runs a batch the way the backend does
# ----------------------------------------------------------------------------------------------------------


def inprocess_runner(backend: str, repo: Path, threads: int) -> Callable[[np.ndarray], Any]:
    if backend == "onnx":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(
            str(repo / "mlp_onnx" / "1" / "model.onnx"), opts, ["CPUExecutionProvider"]
        )
        return lambda x: sess.run(["OUTPUT0"], {"INPUT0": x})
    if backend == "torch":
        import torch

        torch.set_num_threads(threads)
        module = torch.jit.load(str(repo / "mlp_torch" / "1" / "model.pt")).eval()

        def run_torch(x: np.ndarray) -> Any:
            with torch.inference_mode():
                return module(torch.from_numpy(x)).numpy()

        return run_torch
    if backend == "openvino":
        import openvino as ov

        compiled = ov.Core().compile_model(
            str(repo / "mlp_openvino" / "1" / "model.xml"),
            "CPU",
            {
                "INFERENCE_NUM_THREADS": threads,
                "INFERENCE_PRECISION_HINT": "f32",
                "PERFORMANCE_HINT": "LATENCY",
            },
        )
        request = compiled.create_infer_request()
        return lambda x: request.infer({0: x})
    if backend == "fil":
        import xgboost as xgb

        booster = xgb.Booster(model_file=str(repo / "trees_fil" / "1" / "xgboost.json"))
        booster.set_param({"nthread": threads})
        return lambda x: booster.inplace_predict(x)
    raise ValueError(backend)


def batch_of(backend: str, rows: int) -> np.ndarray:
    rng = np.random.default_rng(1234)
    if backend == "fil":
        return trees_data(rows, seed=11)[0]
    return (rng.integers(-512, 512, size=(rows, make_examples.MLP_SIZES[0])) / 256.0).astype(np.float32)


def measure_inprocess(run: Callable[[np.ndarray], Any], x: np.ndarray, duration: float) -> float:
    """Rows/s of `run` back to back on this thread for `duration` seconds, after a short warmup."""
    end = time.perf_counter() + 0.3
    while time.perf_counter() < end:
        run(x)
    runs, start = 0, time.perf_counter()
    end = start + duration
    while time.perf_counter() < end:
        run(x)
        runs += 1
    return runs * x.shape[0] / (time.perf_counter() - start)


# ----------------------------------------------------------------------------------------------------------
# Serving
# ----------------------------------------------------------------------------------------------------------


def workload(backend: str, rows: int) -> payloads.Workload:
    model = MODEL_OF[backend]
    x = batch_of(backend, rows)
    if backend == "fil":
        return payloads.Workload(model, [("input__0", "FP32", x)], ["output__0"])
    if backend == "torch":
        return payloads.Workload(model, [("INPUT__0", "FP32", x)], ["OUTPUT__0"])
    return payloads.Workload(model, [("INPUT0", "FP32", x)], ["OUTPUT0"])


def expected_answer(backend: str, repo: Path, w: payloads.Workload) -> dict[str, np.ndarray]:
    run = inprocess_runner(backend, repo, 1)
    out = run(w.inputs[0][2])
    if backend == "onnx":
        value = out[0]
    elif backend == "openvino":
        value = next(iter(out.values()))
    elif backend == "fil":
        p = np.asarray(out, dtype=np.float32)
        value = np.stack([1 - p, p], axis=1)
    else:
        value = out
    return {w.outputs[0]: np.asarray(value, dtype=np.float32)}


def serve_and_load(
    backend: str, repo: Path, work: Path, duration: int, points: list[tuple[str, int, int]]
) -> dict[str, float]:
    """Start modelhost on the repository with only this backend's model, run each (label, rows, c) point."""
    model = MODEL_OF[backend]
    ports = Ports.pick()
    server = Server(
        "modelhost",
        server_command(
            "modelhost", repo, ports, extra_args=["--model-control-mode=explicit", f"--load-model={model}"]
        ),
        ports,
        work / f"{backend}.log",
    )
    results: dict[str, float] = {}
    server.start()
    try:
        server.wait_ready([model])
        for label, rows, concurrency in points:
            w = workload(backend, rows)
            w.expected = expected_answer(backend, repo, w)
            w.rtol = w.atol = 1e-3
            payloads.check_http("127.0.0.1", ports.http, w, binary=True)
            bodies = loadgen.write_bodies(
                work / "bodies",
                f"{model}-{rows}",
                payloads.binary_body(w),
                payloads.json_body(w),
                payloads.grpc_request(w),
            )
            url = f"{server.http_url}/v2/models/{model}/infer"
            # A short warmup run at the point's concurrency, then the measured one.
            loadgen.run_wrk(url, bodies.binary_file, bodies.binary_header_len, concurrency, 1, 1)
            r = loadgen.run_wrk(url, bodies.binary_file, bodies.binary_header_len, concurrency, duration, 1)
            if r.errors:
                raise RuntimeError(f"{backend} {label}: {r.errors} errors, first: {r.first_error}")
            results[label] = r.rps * rows
            results[f"{label}_p99_ms"] = r.lat_p99_ms
            log(f"  {backend} {label}: {r.rps * rows:,.0f} rows/s (p99 {r.lat_p99_ms:.2f} ms)")
    finally:
        server.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backends", default=",".join(BACKENDS), help=f"comma list of {', '.join(BACKENDS)}")
    p.add_argument("--duration", type=int, default=5, help="seconds per measured point (default 5)")
    p.add_argument("--repeats", type=int, default=2, help="repeats of everything; medians are reported")
    p.add_argument("--out", type=Path, default=HERE / "results", help="directory for the JSON results")
    args = p.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    loadgen.require_tools(["http-binary"])
    threads = threads_per_instance()
    points = [
        ("rows_c1", 1, 1),
        ("rows_c8", 1, 8),
        ("rows_c64", 1, 64),
        ("batch64_c1", 64, 1),
        ("batch64_c4", 64, 4),
    ]
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="modelhost-backends-") as tmp:
        repo = Path(tmp) / "repo"
        build_repository(repo, backends)
        for repeat in range(args.repeats):
            for backend in backends:
                log(f"repeat {repeat + 1}/{args.repeats}: {backend}")
                run = inprocess_runner(backend, repo, threads)
                inproc = {
                    f"b{b}": measure_inprocess(run, batch_of(backend, b), args.duration) for b in (1, 8, 64)
                }
                del run
                all_threads = inprocess_runner(backend, repo, os.cpu_count() or 1)
                inproc["b64_all_cores"] = measure_inprocess(all_threads, batch_of(backend, 64), args.duration)
                del all_threads
                log(f"  {backend} in-process: " + ", ".join(f"{k} {v:,.0f}" for k, v in inproc.items()))
                served = serve_and_load(backend, repo, Path(tmp), args.duration, points)
                runs.append({"repeat": repeat, "backend": backend, "inprocess": inproc, "served": served})

    table = []
    for backend in backends:
        mine = [r for r in runs if r["backend"] == backend]

        def med(section: str, key: str, rows: list[dict[str, Any]] = mine) -> float:
            return statistics.median(r[section][key] for r in rows)

        row = {
            "backend": backend,
            "inprocess_b1": med("inprocess", "b1"),
            "inprocess_b8": med("inprocess", "b8"),
            "inprocess_b64": med("inprocess", "b64"),
            "inprocess_b64_all_cores": med("inprocess", "b64_all_cores"),
            **{key: med("served", key) for key in mine[0]["served"]},
        }
        row["ratio_rows_c64_vs_b64"] = row["rows_c64"] / row["inprocess_b64"]
        row["ratio_batch64_c4_vs_b64"] = row["batch64_c4"] / row["inprocess_b64"]
        table.append(row)

    print(
        f"\nrows/s, medians of {args.repeats} runs of {args.duration} s; {threads} thread(s) per instance\n"
    )
    print(
        "| backend | in-process b1 / b8 / b64 | served rows c1 / c8 / c64 | served batch-64 requests c1 / c4 "
        "| c64 / b64 | batch-64 c4 / b64 |"
    )
    print("|---|---|---|---|---|---|")
    for r in table:
        print(
            f"| {r['backend']} | {r['inprocess_b1']:,.0f} / {r['inprocess_b8']:,.0f} / {r['inprocess_b64']:,.0f} "
            f"| {r['rows_c1']:,.0f} / {r['rows_c8']:,.0f} / {r['rows_c64']:,.0f} "
            f"| {r['batch64_c1']:,.0f} / {r['batch64_c4']:,.0f} "
            f"| {r['ratio_rows_c64_vs_b64']:.2f} | {r['ratio_batch64_c4_vs_b64']:.2f} |"
        )
    mlp = [r for r in table if r["backend"] != "fil"]
    if mlp:
        best = max(mlp, key=lambda r: r["inprocess_b64"])
        print(f"\nfastest in-process on the MLP at batch 64 ({threads} thread(s)): {best['backend']}")
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = args.out / f"backends-{stamp}.json"
    path.write_text(
        json.dumps(
            {
                "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
                "threads_per_instance": threads,
                "duration_s": args.duration,
                "trees": TREES,
                "runs": runs,
                "table": table,
            },
            indent=2,
        )
    )
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
