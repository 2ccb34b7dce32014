"""In-process ONNX Runtime baseline for the load benchmark: how many rows/s the bare runtime gives for a model
at the benchmark's batch size, with the intra-op threads the server's instance uses, measured in the benchmark
process while no server runs.  A server's rows/s divided by this is the share of the runtime's own speed
that survives serving (HTTP, decoding, scheduling, the instance hand-off).

    .venv/bin/python benchmarks/raw_onnxruntime.py --model mlp --batch-size 64 --duration 5
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

EXAMPLES = Path(__file__).resolve().parent.parent / "src" / "modelhost" / "examples"


@dataclass
class RawResult:
    model: str
    batch_size: int
    intra_op_threads: int
    runs: int
    duration_s: float
    rows_per_s: float
    runs_per_s: float
    lat_p50_ms: float
    cpu_us_per_row: float

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def instance_count(model: str, examples: Path = EXAMPLES) -> int:
    """Instances modelhost (like Triton) gives the example model on a CPU: the sum of its instance_group
    counts, or 2 where the config has none (Triton's default for an onnxruntime model on a CPU)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse(
        (examples / model / "config.pbtxt").read_text(), model_config_pb2.ModelConfig()
    )
    if not config.instance_group:
        return 2
    return sum(max(1, g.count) for g in config.instance_group)


def modelhost_intra_op_threads(instances: int) -> int:
    """The intra-op threads modelhost's ONNX backend gives each session by default (no
    ``intra_op_thread_count`` in the config or --backend-config): its own function where importable."""
    try:
        from modelhost.backends.cpu_threads import default_intra_op_threads

        return int(default_intra_op_threads(instances))
    except Exception:  # modelhost not importable (e.g. mid-edit): the same formula
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return max(1, (cores - 1) // max(1, instances))


def measure(
    model: str,
    feeds: dict[str, np.ndarray],
    outputs: list[str],
    intra_op_threads: int,
    duration: float,
    examples: Path = EXAMPLES,
    warmup: float = 0.5,
) -> RawResult:
    """Run ``session.run`` back to back for ``duration`` seconds (after ``warmup`` seconds) on one thread of
    the caller, with a session configured like the server's (intra-op threads as given, inter-op 1, all graph
    optimizations, CPU provider)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = intra_op_threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(
        str(examples / model / "1" / "model.onnx"), opts, providers=["CPUExecutionProvider"]
    )
    batch = int(next(iter(feeds.values())).shape[0])
    end = time.perf_counter() + warmup
    while time.perf_counter() < end:
        sess.run(outputs, feeds)
    lat: list[float] = []
    cpu0, t0 = time.process_time(), time.perf_counter()
    end = t0 + duration
    now = t0
    while now < end:
        sess.run(outputs, feeds)
        t = time.perf_counter()
        lat.append(t - now)
        now = t
    elapsed, cpu = now - t0, time.process_time() - cpu0
    n = len(lat)
    return RawResult(
        model=model,
        batch_size=batch,
        intra_op_threads=intra_op_threads,
        runs=n,
        duration_s=elapsed,
        rows_per_s=n * batch / elapsed,
        runs_per_s=n / elapsed,
        lat_p50_ms=float(np.percentile(lat, 50) * 1e3),
        cpu_us_per_row=1e6 * cpu / (n * batch),
    )


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import payloads

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="mlp")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--threads", type=int, default=None, help="intra-op threads (default: modelhost's)")
    args = p.parse_args(argv)
    w = payloads.make_workload(args.model, args.batch_size)
    threads = args.threads or modelhost_intra_op_threads(instance_count(args.model))
    r = measure(args.model, {n: a for n, _, a in w.inputs}, w.outputs, threads, args.duration)
    print(
        f"{r.model}: batch {r.batch_size}, {r.intra_op_threads} intra-op thread(s): {r.rows_per_s:.0f} rows/s "
        f"({r.runs_per_s:.1f} runs/s, p50 {r.lat_p50_ms:.2f} ms, {r.cpu_us_per_row:.1f} us CPU/row)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
