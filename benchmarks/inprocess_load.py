"""The engine process's CPU per request under concurrent load, in process: HTTP routes, engine, batcher and
backend (with a python model, its stubs are real processes), but no sockets to clients and no load generator,
so that two builds can be compared on a noisy machine by CPU rather than by rate.

    .venv/bin/python benchmarks/inprocess_load.py --repo REPO --model identity --concurrency 64 --requests 40000
    PYTHONPATH=/old/checkout/src .venv/bin/python benchmarks/inprocess_load.py ... (the same, for the old build)

REPO: e.g. the python identity repository `run_load.py --python-backend` builds (reference_repo.py). It prints
requests per second, the engine process's CPU per request and its children's (the python stubs).
`--profile FILE` writes a cProfile of the measured part.

`--count-bytecodes N` instead counts the Python bytecodes the engine process runs per request (sys.settrace with
opcode events), and prints the N functions that run most. The count does not depend on the machine's speed or
load, so it compares two builds where timings on a shared 2-core machine move by 20% from run to run; it leaves
out what C code (numpy, the kernel) costs, so a change is judged on both.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import resource
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import uvloop
from bytecodes import BytecodeCount

from modelhost.backends.api import BackendServices
from modelhost.engine.engine import Engine
from modelhost.engine.registry.entries import LoadSettings
from modelhost.engine.registry.registry import ModelRegistry
from modelhost.frontends.http.messages import HttpRequest
from modelhost.frontends.http.routes import HttpRoutes
from modelhost.repository.sources import open_repository


def _children_cpu_s() -> float:
    """CPU of this process's children still running (the stubs), from /proc."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in Path(f"/proc/{os.getpid()}/task").iterdir():
        children = Path(f"/proc/{os.getpid()}/task/{pid.name}/children").read_text().split()
        for child in children:
            fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _request(model: str) -> HttpRequest:
    data = np.arange(16, dtype=np.float32).tobytes()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "FP32",
                    "shape": [1, 16],
                    "parameters": {"binary_data_size": 64},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    headers = {
        "inference-header-content-length": str(len(header)),
        "content-type": "application/octet-stream",
    }
    return HttpRequest("POST", f"/v2/models/{model}/infer", "", headers, header + data)


async def main(args: argparse.Namespace) -> None:
    services = BackendServices(loop=asyncio.get_running_loop())
    registry = ModelRegistry([open_repository(args.repo)], LoadSettings(), "none", services)
    engine = Engine(registry)  # the backends' handle on the engine: services.engine
    await registry.start()
    routes = HttpRoutes(engine, 1 << 26)
    request = _request(args.model)
    answer = await routes(request)
    assert answer.status == 200, answer.body
    per_client = args.requests // args.concurrency

    async def client(n: int) -> None:
        for _ in range(n):
            answer = await routes(request)
            if answer.status != 200:
                raise RuntimeError(answer.body)

    await asyncio.gather(*(client(200) for _ in range(args.concurrency)))  # warm up
    if args.count_bytecodes:
        await _count_bytecodes(client, args)
        registry.close()
        return
    for _ in range(args.repeats):
        profile = cProfile.Profile() if args.profile else None
        usage, children, start = (
            resource.getrusage(resource.RUSAGE_SELF),
            _children_cpu_s(),
            time.perf_counter(),
        )
        if profile is not None:
            profile.enable()
        await asyncio.gather(*(client(per_client) for _ in range(args.concurrency)))
        if profile is not None:
            profile.disable()
            profile.dump_stats(args.profile)
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF)
        n = per_client * args.concurrency
        own = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
        print(
            f"{args.label}: {n / elapsed:,.0f} req/s; engine process {1e6 * own / n:.1f} us/request "
            f"(user {1e6 * (after.ru_utime - usage.ru_utime) / n:.1f}); "
            f"stubs {1e6 * (_children_cpu_s() - children) / n:.1f} us/request",
            flush=True,
        )
    registry.close()


async def _count_bytecodes(client: Callable[[int], Awaitable[None]], args: argparse.Namespace) -> None:
    per_client = 20
    with BytecodeCount() as count:
        await asyncio.gather(*(client(per_client) for _ in range(args.concurrency)))
    report = count.report(per_client * args.concurrency, args.count_bytecodes)
    print(f"{args.label}, the engine process: {report}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repo", required=True)
    parser.add_argument("--model", default="identity")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=40_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--label", default="this build")
    parser.add_argument("--profile", default="")
    parser.add_argument("--count-bytecodes", type=int, default=0, metavar="N")
    uvloop.run(main(parser.parse_args()))
