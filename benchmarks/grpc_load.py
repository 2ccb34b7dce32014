"""Closed-loop gRPC load generator for the KServe v2 ``ModelInfer`` call.

``concurrency`` in-flight loops, spread over ``processes`` worker processes (each runs its own grpc.aio
event loop and channel), each sending the same prebuilt ``inference.ModelInferRequest`` again as soon as
the previous answer arrives, for a fixed duration after a short warm-up.  The request is serialized once
(``payloads.grpc_request``, built with ``tritonclient.grpc.service_pb2``) and sent as raw bytes on the
``/inference.GRPCInferenceService/ModelInfer`` method, and answers are kept as raw bytes: no protobuf work
per call on the client side, so the generator costs as little CPU as Python allows.  Answer *contents* are
checked once, before the run, by ``payloads.check_grpc``; here any non-OK status counts as an error.

Standalone use::

    python benchmarks/grpc_load.py 127.0.0.1:8001 --model mlp --concurrency 8 --duration 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

METHOD = "/inference.GRPCInferenceService/ModelInfer"


@dataclass
class LoadResult:
    requests: int
    errors: int
    duration_s: float
    rps: float
    lat_p50_ms: float
    lat_p99_ms: float
    lat_mean_ms: float
    first_error: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


async def _worker_async(
    target: str, request: bytes, loops: int, start_at: float, warmup: float, duration: float
) -> tuple[list[float], int, str, float]:
    import grpc

    options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    async with grpc.aio.insecure_channel(target, options=options) as channel:
        call = channel.unary_unary(METHOD)  # no (de)serializers: bytes in, bytes out
        await channel.channel_ready()
        delay = start_at - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        t_start = time.perf_counter() + warmup
        t_end = t_start + duration
        latencies: list[float] = []
        errors = 0
        first_error = ""

        async def loop() -> None:
            nonlocal errors, first_error
            perf = time.perf_counter
            while True:
                t0 = perf()
                if t0 >= t_end:
                    return
                try:
                    await call(request, timeout=30)
                except grpc.aio.AioRpcError as e:
                    t1 = perf()
                    if t_start <= t1 < t_end:
                        errors += 1
                        if not first_error:
                            first_error = f"{e.code().name}: {e.details()}"
                    continue
                t1 = perf()
                if t_start <= t1 < t_end:
                    latencies.append(t1 - t0)

        await asyncio.gather(*(loop() for _ in range(loops)))
        return latencies, errors, first_error, duration


def _worker(
    target: str,
    request: bytes,
    loops: int,
    start_at: float,
    warmup: float,
    duration: float,
    out: mp.Queue[Any],
) -> None:
    try:
        lat, errors, first_error, dur = asyncio.run(
            _worker_async(target, request, loops, start_at, warmup, duration)
        )
        out.put((np.asarray(lat, dtype=np.float64), errors, first_error, dur))
    except BaseException as e:  # report, never hang the parent
        out.put((np.zeros(0), -1, f"worker failed: {e!r}", duration))


def run(
    target: str,
    request: bytes,
    concurrency: int,
    duration: float,
    processes: int = 2,
    warmup: float = 1.0,
) -> LoadResult:
    """Run the closed loop and return aggregate throughput and latency."""
    processes = max(1, min(processes, concurrency))
    loops = [concurrency // processes + (1 if i < concurrency % processes else 0) for i in range(processes)]
    ctx = mp.get_context("spawn")
    queue: mp.Queue[Any] = ctx.Queue()
    start_at = time.time() + 1.0 + 0.25 * processes  # let every worker import and connect first
    procs = [
        ctx.Process(target=_worker, args=(target, request, n, start_at, warmup, duration, queue), daemon=True)
        for n in loops
    ]
    for p in procs:
        p.start()
    parts = [queue.get(timeout=duration + warmup + 120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    lat = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0)
    failed = [p[2] for p in parts if p[1] < 0]
    if failed:
        raise RuntimeError("; ".join(failed))
    errors = sum(p[1] for p in parts)
    first_error = next((p[2] for p in parts if p[2]), "")
    n = int(lat.size)
    return LoadResult(
        requests=n,
        errors=errors,
        duration_s=duration,
        rps=n / duration,
        lat_p50_ms=float(np.percentile(lat, 50) * 1e3) if n else float("nan"),
        lat_p99_ms=float(np.percentile(lat, 99) * 1e3) if n else float("nan"),
        lat_mean_ms=float(lat.mean() * 1e3) if n else float("nan"),
        first_error=first_error,
    )


def main(argv: list[str] | None = None) -> int:
    from payloads import MODELS, grpc_request, make_workload

    parser = argparse.ArgumentParser(description="closed-loop gRPC ModelInfer load")
    parser.add_argument("target", help="host:port of the gRPC endpoint")
    parser.add_argument("--model", default="simple", choices=MODELS)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args(argv)
    request = grpc_request(make_workload(args.model, args.batch_size))
    result = run(args.target, request, args.concurrency, args.duration, args.processes, args.warmup)
    print(json.dumps(result.as_dict()))
    return 0 if result.errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
