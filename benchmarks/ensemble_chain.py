#!/usr/bin/env python3
"""An ensemble of two ONNX steps against a client that calls the same two models one after the other.

The pipeline: a first step `mlp` (FP32 [256] -> [10]: the example MLP, or with `--first-step tiny` an ONNX
model that only doubles the first 10 numbers, so that serving costs dominate) then `softmax10` (an ONNX Softmax
over the 10 scores). `--batching-us N` gives the first step dynamic batching with that queue delay.
Served by one modelhost; in each round, at each concurrency, the same asyncio HTTP/1.1 load generator (binary
tensor extension, keep-alive connections, one process) runs closed loops that either

* `ensemble`: POST the input to the ensemble `mlp_softmax` and read PROBS, or
* `chain`: POST the input to `mlp`, read OUTPUT0, POST it to `softmax10`, read PROBS,

and counts completed pipelines per second. Modes alternate within a round; the table gives medians over the
rounds and the ratio ensemble/chain. Answers are checked against each other once before measuring.

    .venv/bin/python benchmarks/ensemble_chain.py --concurrency 8,64 --duration 10 --repeats 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from servers import Ports, Server, server_command  # noqa: E402

EXAMPLES = HERE.parent / "src" / "modelhost" / "examples"


def _save(graph: onnx.GraphProto, path: Path) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True)
    onnx.save(model, str(path))


def build_repo(repo: Path, first_step: str = "mlp", batching_us: int | None = None) -> None:
    if first_step == "mlp":
        shutil.copytree(EXAMPLES / "mlp", repo / "mlp")
    else:
        fp32, i64 = TensorProto.FLOAT, TensorProto.INT64
        graph = helper.make_graph(
            [
                helper.make_node("Slice", ["INPUT0", "starts", "ends", "axes"], ["head"]),
                helper.make_node("Mul", ["head", "two"], ["OUTPUT0"]),
            ],
            "tiny",
            [helper.make_tensor_value_info("INPUT0", fp32, ["batch", 256])],
            [helper.make_tensor_value_info("OUTPUT0", fp32, ["batch", 10])],
            initializer=[
                helper.make_tensor("starts", i64, [1], [0]),
                helper.make_tensor("ends", i64, [1], [10]),
                helper.make_tensor("axes", i64, [1], [1]),
                helper.make_tensor("two", fp32, [1], [2.0]),
            ],
        )
        _save(graph, repo / "mlp" / "1" / "model.onnx")
        (repo / "mlp" / "config.pbtxt").write_text(
            'platform: "onnxruntime_onnx"\nmax_batch_size: 64\n'
            'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 256 ] } ]\n'
            'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 10 ] } ]\n'
            "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        )
    if batching_us is not None:
        with open(repo / "mlp" / "config.pbtxt", "a") as config:
            config.write(f"dynamic_batching {{ max_queue_delay_microseconds: {batching_us} }}\n")
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["SCORES"], ["PROBS"], axis=-1)],
        "softmax10",
        [helper.make_tensor_value_info("SCORES", TensorProto.FLOAT, ["batch", 10])],
        [helper.make_tensor_value_info("PROBS", TensorProto.FLOAT, ["batch", 10])],
    )
    _save(graph, repo / "softmax10" / "1" / "model.onnx")
    (repo / "softmax10" / "config.pbtxt").write_text(
        'platform: "onnxruntime_onnx"\nmax_batch_size: 64\n'
        'input [ { name: "SCORES" data_type: TYPE_FP32 dims: [ 10 ] } ]\n'
        'output [ { name: "PROBS" data_type: TYPE_FP32 dims: [ 10 ] } ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    )
    (repo / "mlp_softmax" / "1").mkdir(parents=True)
    (repo / "mlp_softmax" / "config.pbtxt").write_text(
        'platform: "ensemble"\nmax_batch_size: 64\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 256 ] } ]\n'
        'output [ { name: "PROBS" data_type: TYPE_FP32 dims: [ 10 ] } ]\n'
        "ensemble_scheduling { step [\n"
        '  { model_name: "mlp" model_version: -1 input_map { key: "INPUT0" value: "INPUT0" }'
        ' output_map { key: "OUTPUT0" value: "scores" } },\n'
        '  { model_name: "softmax10" model_version: -1 input_map { key: "SCORES" value: "scores" }'
        ' output_map { key: "PROBS" value: "PROBS" } }\n] }\n'
    )


def binary_request(model: str, name: str, array: np.ndarray, output: str) -> bytes:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "shape": list(array.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": array.nbytes},
                }
            ],
            "outputs": [{"name": output, "parameters": {"binary_data": True}}],
        }
    ).encode()
    body = header + array.tobytes()
    return (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: bench\r\nContent-Type: application/octet-stream\r\n"
        f"Inference-Header-Content-Length: {len(header)}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> bytes:
    """Send one request; return the binary output that ends the answer (one output: the last bytes)."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = head[9:12]
    length = header_length = 0
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        key = key.strip().lower()
        if key == b"content-length":
            length = int(value)
        elif key == b"inference-header-content-length":
            header_length = int(value)
    body = await reader.readexactly(length)
    if status != b"200":
        raise RuntimeError(f"HTTP {status.decode()}: {body[:200]!r}")
    return body[header_length:]


async def loops(port: int, mode: str, concurrency: int, duration: float, x: np.ndarray) -> tuple[int, float]:
    ensemble = binary_request("mlp_softmax", "INPUT0", x, "PROBS")
    first = binary_request("mlp", "INPUT0", x, "OUTPUT0")
    done = 0
    stop = time.perf_counter() + duration

    async def one() -> None:
        nonlocal done
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.perf_counter() < stop:
                if mode == "ensemble":
                    await exchange(reader, writer, ensemble)
                else:
                    scores = np.frombuffer(await exchange(reader, writer, first), np.float32).reshape(1, 10)
                    await exchange(reader, writer, binary_request("softmax10", "SCORES", scores, "PROBS"))
                done += 1
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(concurrency)))
    return done, time.perf_counter() - started


async def check(port: int, x: np.ndarray) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        via_ensemble = np.frombuffer(
            await exchange(reader, writer, binary_request("mlp_softmax", "INPUT0", x, "PROBS")), np.float32
        )
        scores = np.frombuffer(
            await exchange(reader, writer, binary_request("mlp", "INPUT0", x, "OUTPUT0")), np.float32
        )
        via_chain = np.frombuffer(
            await exchange(
                reader, writer, binary_request("softmax10", "SCORES", scores.reshape(1, 10), "PROBS")
            ),
            np.float32,
        )
    finally:
        writer.close()
    np.testing.assert_allclose(via_ensemble, via_chain, rtol=1e-6)
    assert abs(float(via_ensemble.sum()) - 1.0) < 1e-4


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", default="1,8,64")
    p.add_argument("--duration", type=float, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--first-step", choices=("mlp", "tiny"), default="mlp")
    p.add_argument("--batching-us", type=int, default=None, help="dynamic batching on the first step")
    args = p.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    x = np.random.default_rng(0).standard_normal((1, 256)).astype(np.float32)
    results: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        build_repo(repo, args.first_step, args.batching_us)
        ports = Ports.pick()
        server = Server(
            "modelhost", server_command("modelhost", repo, ports), ports, Path(tmp) / "server.log"
        )
        server.start()
        try:
            server.wait_ready(["mlp", "softmax10", "mlp_softmax"])
            asyncio.run(check(ports.http, x))
            asyncio.run(loops(ports.http, "ensemble", 8, 2, x))  # warm-up
            for _ in range(args.repeats):
                for concurrency in levels:
                    for mode in ("ensemble", "chain"):
                        done, took = asyncio.run(loops(ports.http, mode, concurrency, args.duration, x))
                        results.setdefault((mode, concurrency), []).append(done / took)
                        print(f"{mode:8} c={concurrency:<3} {done / took:8.0f} pipelines/s", file=sys.stderr)
        finally:
            server.stop()
    print("| concurrency | ensemble (pipelines/s) | client chain (pipelines/s) | ratio |")
    print("|---|---|---|---|")
    for concurrency in levels:
        ens = statistics.median(results[("ensemble", concurrency)])
        chain = statistics.median(results[("chain", concurrency)])
        print(f"| {concurrency} | {ens:.0f} | {chain:.0f} | {ens / chain:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
