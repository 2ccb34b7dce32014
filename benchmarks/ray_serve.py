"""`modelhost ray serve` against one `modelhost serve`, same model, same machine, same run.

1. Throughput and latency: the `simple` ONNX model, HTTP binary (wrk) and gRPC (h2load) at c=8 and c=64, first
   from one `modelhost serve`, then through the Ray ingress with the model in a deployment of one replica.
2. A multiplexed pool's hit against its miss: sequential requests to one model of a pool that keeps 2 of 5
   models per replica (hits), then to the 5 in turn (each request evicts one model and loads another).
3. A step in load: 8 closed-loop clients on a python model sleeping 50 ms a request, deployed with
   `max_replicas: 2`, then none; the replica count (from the repository index) over time.
4. Ensembles (two `simple` steps), HTTP binary at c=8 and c=64: `simple_ensemble` on one server; on the cluster,
   `simple_ensemble` whose steps run in `simple`'s deployment (each its own deployment), and `grouped_ensemble`
   whose steps' model shares its deployment (the steps run in the ensemble's replica).

    .venv/bin/python benchmarks/ray_serve.py --duration 5 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as httpclient

sys.path.insert(0, str(Path(__file__).parent))
import loadgen
import payloads
from servers import Ports, Server, server_command

import modelhost

EXAMPLES = Path(modelhost.__file__).parent / "examples"
PYTHON_MODELS = Path(__file__).parents[1] / "tests" / "e2e" / "python_models"
POOL = [f"m{i}" for i in range(1, 6)]
DEPLOYMENTS = """
defaults:
  actor: {num_cpus: 0.05}
  num_replicas: 1
deployments:
  pool:
    models: [m1, m2, m3, m4, m5]
    max_models_per_replica: 2
  pipeline:
    models: [grouped_ensemble, inner]
  step:
    models: [step]
    autoscaling: {min_replicas: 1, max_replicas: 2, target_ongoing_requests: 2, upscale_delay_s: 0.5,
                  downscale_delay_s: 2, metrics_interval_s: 0.5, look_back_period_s: 1}
"""


def _copy(source: Path, repo: Path, name: str) -> None:
    shutil.copytree(source, repo / name)
    config = repo / name / "config.pbtxt"
    text = config.read_text()
    old = text.split('name: "', 1)[1].split('"', 1)[0]
    config.write_text(text.replace(f'name: "{old}"', f'name: "{name}"', 1))


def build(repo: Path) -> None:
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    for name in POOL:
        _copy(EXAMPLES / "simple", repo, name)
    _copy(PYTHON_MODELS / "identity_delay", repo, "step")
    shutil.copytree(EXAMPLES / "simple_ensemble", repo / "simple_ensemble")
    _copy(EXAMPLES / "simple", repo, "inner")
    _copy(EXAMPLES / "simple_ensemble", repo, "grouped_ensemble")
    config = repo / "grouped_ensemble" / "config.pbtxt"
    config.write_text(config.read_text().replace('model_name: "simple"', 'model_name: "inner"'))


def load(
    server: Server,
    bodies: loadgen.Bodies,
    response_frame: int,
    args: argparse.Namespace,
    model: str = "simple",
    protocols: tuple[str, ...] = ("http-binary", "grpc-h2load"),
) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for protocol in protocols:
        for concurrency in (8, 64):
            runs = []
            for _ in range(args.repeats):
                if protocol == "http-binary":
                    r = loadgen.run_wrk(
                        f"{server.http_url}/v2/models/{model}/infer",
                        bodies.binary_file,
                        bodies.binary_header_len,
                        concurrency,
                        args.duration,
                        threads=1,
                    )
                else:
                    r = loadgen.run_h2load(
                        server.grpc_target,
                        bodies.grpc_frame_file,
                        response_frame,
                        concurrency,
                        args.duration,
                        8,
                    )
                if r.errors:
                    raise RuntimeError(f"{server.name} {protocol} c={concurrency}: {r.first_error}")
                runs.append(r)
            key = (
                f"{protocol} c={concurrency}" if model == "simple" else f"{model} {protocol} c={concurrency}"
            )
            rows[key] = {
                "rps": statistics.median(r.rps for r in runs),
                "p50_ms": statistics.median(r.lat_p50_ms for r in runs),
                "p99_ms": statistics.median(r.lat_p99_ms for r in runs),
            }
            print(f"  {server.name} {key}: {rows[key]}", flush=True)
    return rows


def _simple_inputs(offset: int) -> list[httpclient.InferInput]:
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(np.full((1, 16), offset, dtype=np.int32))
    inputs[1].set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
    return inputs


def multiplexing(url: str) -> dict[str, float]:
    client = httpclient.InferenceServerClient(url, network_timeout=120)
    for name in POOL[:2]:
        client.infer(name, _simple_inputs(0))
    time.sleep(3)  # the replica's next report says it holds them: hits then take modelhost's link

    def timed(name: str) -> float:
        start = time.perf_counter()
        client.infer(name, _simple_inputs(0))
        return (time.perf_counter() - start) * 1e3

    hits = [timed(POOL[i % 2]) for i in range(100)]
    misses = [timed(POOL[2 + i % 3]) for i in range(15)]  # 3 models through 2 slots: every request misses
    client.close()
    return {"hit_p50_ms": statistics.median(hits), "miss_p50_ms": statistics.median(misses)}


def step(url: str, load_s: float, idle_s: float) -> list[tuple[float, int, float]]:
    """The replica count of `step` every 0.5 s and the req/s since the last sample: under 8 clients for load_s,
    then idle for idle_s."""
    stop = threading.Event()
    done = [0]

    def client_loop() -> None:
        client = httpclient.InferenceServerClient(url, network_timeout=60)
        data = httpclient.InferInput("INPUT0", [4], "FP32")
        data.set_data_from_numpy(np.ones(4, dtype=np.float32))
        delay = httpclient.InferInput("DELAY_MS", [1], "INT32")
        delay.set_data_from_numpy(np.array([50], dtype=np.int32))
        while not stop.is_set():
            client.infer("step", [data, delay])
            done[0] += 1
        client.close()

    index = httpclient.InferenceServerClient(url)
    threads = [threading.Thread(target=client_loop) for _ in range(8)]
    start = time.monotonic()
    for t in threads:
        t.start()
    samples: list[tuple[float, int, float]] = []
    last_done, last_t = 0, time.monotonic()
    while time.monotonic() - start < load_s + idle_s:
        if stop.is_set() is False and time.monotonic() - start >= load_s:
            stop.set()
        rows = {r["name"]: r for r in index.get_model_repository_index()}
        now, count = time.monotonic(), done[0]
        rate = (count - last_done) / (now - last_t)
        last_done, last_t = count, now
        samples.append((round(now - start, 1), int(rows["step"].get("replicas", 0)), round(rate)))
        time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join()
    index.close()
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / "ray_serve.json")
    args = parser.parse_args()
    loadgen.require_tools(["http-binary", "grpc-h2load"])
    work = Path(tempfile.mkdtemp(prefix="ray-bench-"))
    repo = work / "repo"
    repo.mkdir()
    build(repo)
    w = payloads.make_workload("simple")
    bodies = loadgen.write_bodies(
        work / "bodies", "simple", payloads.binary_body(w), payloads.json_body(w), payloads.grpc_request(w)
    )
    results: dict[str, Any] = {}
    single = Server(
        "serve",
        server_command(
            "modelhost",
            repo,
            ports := Ports.pick(),
            extra_args=[
                "--model-control-mode=explicit",
                "--load-model=simple",
                "--load-model=simple_ensemble",
            ],
        ),
        ports,
        work / "serve.log",
    )
    single.start()
    http_only = ("http-binary",)
    try:
        single.wait_ready(["simple", "simple_ensemble"])
        response_frame = 5 + payloads.check_grpc(single.host, ports.grpc, w)  # with the gRPC message prefix
        results["serve"] = load(single, bodies, response_frame, args)
        results["serve_ensemble"] = load(single, bodies, response_frame, args, "simple_ensemble", http_only)
    finally:
        single.stop()
    (work / "deployments.yaml").write_text(DEPLOYMENTS)
    ray_ports = Ports.pick()
    ray_cmd = [
        sys.executable,
        "-m",
        "modelhost",
        "ray",
        "serve",
        f"--model-repository={repo}",
        f"--deployments={work / 'deployments.yaml'}",
        "--num-cpus=2",
        f"--http-port={ray_ports.http}",
        f"--grpc-port={ray_ports.grpc}",
        f"--metrics-port={ray_ports.metrics}",
    ]
    ray_server = Server("ray", ray_cmd, ray_ports, work / "ray.log")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local cluster of the benchmark's own
    ray_server.start()
    try:
        ray_server.wait_ready(["simple"], timeout=300)
        results["ray"] = load(ray_server, bodies, response_frame, args)
        ray_server.wait_ready(["simple_ensemble", "grouped_ensemble"], timeout=60)
        results["ray_ensemble"] = {
            **load(ray_server, bodies, response_frame, args, "simple_ensemble", http_only),
            **load(ray_server, bodies, response_frame, args, "grouped_ensemble", http_only),
        }
        url = f"127.0.0.1:{ray_ports.http}"
        results["multiplexing"] = multiplexing(url)
        print(f"  multiplexing: {results['multiplexing']}", flush=True)
        results["step"] = step(url, load_s=20, idle_s=25)
        print(f"  step (s, replicas, req/s): {results['step']}", flush=True)
    finally:
        ray_server.stop(timeout=120)
    print(
        "\n| workload | serve req/s (p50/p99 ms) | ray req/s (p50/p99 ms) | ray / serve |\n|---|---|---|---|"
    )
    for key, one in results["serve"].items():
        other = results["ray"][key]
        print(
            f"| {key} | {one['rps']:,.0f} ({one['p50_ms']:.2f}/{one['p99_ms']:.2f}) | "
            f"{other['rps']:,.0f} ({other['p50_ms']:.2f}/{other['p99_ms']:.2f}) | {other['rps'] / one['rps']:.2f} |"
        )
    print("\n| ensemble, HTTP binary | req/s (p50/p99 ms) | / one server's simple_ensemble |\n|---|---|---|")
    for concurrency in (8, 64):
        one = results["serve_ensemble"][f"simple_ensemble http-binary c={concurrency}"]
        rows = [("one server", one)] + [
            (f"ray, {model}", results["ray_ensemble"][f"{model} http-binary c={concurrency}"])
            for model in ("simple_ensemble", "grouped_ensemble")
        ]
        for name, row in rows:
            print(
                f"| {name} c={concurrency} | {row['rps']:,.0f} ({row['p50_ms']:.2f}/{row['p99_ms']:.2f}) | "
                f"{row['rps'] / one['rps']:.2f} |"
            )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
