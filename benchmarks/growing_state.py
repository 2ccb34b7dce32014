#!/usr/bin/env python3
"""Implicit state that grows each step (issue 29): server memory and time per sequence step at `--steps` steps.

An ONNX model whose state is a history: STATE_OUT = STATE_IN with the step's INPUT row (`--row` FP32 values)
appended, OUTPUT = the state's length. One sequence of `--steps` requests over HTTP (keep-alive, one at a time);
the server's process-tree RSS is sampled every 20 ms. The state after the last step is `steps x row x 4` bytes.

`--variant label=command[;flags]` runs it against a server command; `;plain` serves the model without
`use_growable_memory` / `use_same_buffer_for_input_output` (a server from before they were accepted refuses
them), which is the copy-per-step baseline when that server copies the state each step:

    .venv/bin/python benchmarks/growing_state.py \
        --variant "copy per step=/tmp/mh.sh --mh-old;plain" --variant "no copy=/tmp/mh.sh"
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from servers import Ports, Server, server_command  # noqa: E402

from e2e.models import save  # noqa: E402


def write_model(repo: Path, row: int, flags: bool) -> None:
    from onnx import TensorProto, helper

    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    graph = helper.make_graph(
        [
            helper.make_node("Concat", ["STATE_IN", "INPUT"], ["STATE_OUT"], axis=0),
            helper.make_node("Shape", ["STATE_OUT"], ["LENGTH"], end=1),
        ],
        "growing",
        [
            helper.make_tensor_value_info("INPUT", f32, [1, row]),
            helper.make_tensor_value_info("STATE_IN", f32, ["n", row]),
        ],
        [
            helper.make_tensor_value_info("LENGTH", i64, [1]),
            helper.make_tensor_value_info("STATE_OUT", f32, ["m", row]),
        ],
    )
    save(graph, repo / "growing" / "1" / "model.onnx")
    extra = "use_same_buffer_for_input_output: true use_growable_memory: true" if flags else ""
    (repo / "growing" / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nmax_batch_size: 0\n'
        f'input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ 1, {row} ] }} ]\n'
        'output [ { name: "LENGTH" data_type: TYPE_INT64 dims: [ 1 ] } ]\n'
        "sequence_batching {\n  max_sequence_idle_microseconds: 600000000\n"
        f'  state [ {{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ -1, {row} ]\n'
        f"            {extra}\n"
        f'            initial_state [ {{ data_type: TYPE_FP32 dims: [ 1, {row} ] zero_data: true name: "z" }} ] }} ]\n'
        "}\ninstance_group [ { count: 1 kind: KIND_CPU } ]\n"
    )


def tree_rss(pid: int) -> int:
    try:
        root = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
    except psutil.Error:
        return 0


def run_variant(
    label: str, command: str, plain: bool, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    repo = work / label.replace(" ", "_")
    write_model(repo, args.row, flags=not plain)
    ports = Ports.pick()
    server = Server(
        label, server_command("modelhost", repo, ports, command), ports, work / f"{repo.name}.log"
    )
    server.start()
    try:
        server.wait_ready(["growing"])
        assert server.proc is not None
        pid = server.proc.pid
        base = tree_rss(pid)
        peak = [base]
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], tree_rss(pid))
                time.sleep(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        connection = http.client.HTTPConnection("127.0.0.1", ports.http, timeout=120)
        values = [1.0] * args.row
        times: list[float] = []
        for step in range(args.steps):
            params = {"sequence_id": 7, "sequence_start": step == 0, "sequence_end": step == args.steps - 1}
            body = json.dumps(
                {
                    "parameters": params,
                    "inputs": [{"name": "INPUT", "shape": [1, args.row], "datatype": "FP32", "data": values}],
                }
            )
            started = time.perf_counter()
            connection.request("POST", "/v2/models/growing/infer", body, {"Content-Type": "application/json"})
            reply = connection.getresponse()
            answer = json.loads(reply.read())
            times.append(time.perf_counter() - started)
            if reply.status != 200:
                raise RuntimeError(answer)
            if step == args.steps - 2:
                before_end = tree_rss(pid)
        length = answer["outputs"][0]["data"][0]
        stop.set()
        sampler.join()
        last = times[-100:]
        return {
            "variant": label,
            "state_rows_at_end": length,
            "state_mib_at_end": length * args.row * 4 / 2**20,
            "rss_base_mib": base / 2**20,
            "rss_before_end_mib": before_end / 2**20,
            "rss_peak_mib": peak[0] / 2**20,
            "growth_per_step_kib": (before_end - base) / (args.steps - 1) / 1024,
            "ms_per_step_first_100": statistics.median(times[:100]) * 1e3,
            "ms_per_step_last_100": statistics.median(last) * 1e3,
            "seconds": sum(times),
        }
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--row", type=int, default=4096, help="FP32 values appended each step")
    parser.add_argument("--variant", action="append", default=[], help="label=command[;plain]")
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    variants = args.variant or [f"this checkout={sys.executable} -m modelhost"]
    work = Path(tempfile.mkdtemp(prefix="modelhost-growing-"))
    results = []
    try:
        for variant in variants:
            label, _, rest = variant.partition("=")
            command, _, option = rest.partition(";")
            result = run_variant(label, command, option == "plain", args, work)
            print(json.dumps(result), flush=True)
            results.append(result)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
