"""Load-generator processes: each runs its own event loop and sends prebuilt requests (specs.py), over HTTP
(http_load.py) or gRPC (grpc_load.py), whole sequences for sequence models (sequences.py).

The parent talks to a worker over a pipe, with tuples:

    ("concurrency", n)     keep n requests in flight (closed loop)        -> ("ok",) | ("error", msg)
    ("rate", r, dist, seed) send r requests/s, constant or poisson (open)  -> ("ok",) | ("error", msg)
    ("stop",)              send nothing new, wait for answers in flight   -> ("ok",)
    ("collect", t0, t1)    requests answered in [t0, t1) (time.monotonic_ns, the same clock in every process)
                           -> ("window", starts, ends, send_ns, recv_ns, timed, errors, first_error,
                               firsts, counts)  (firsts/counts: streaming only, first-response times and
                               the number of responses of each request)
    ("exit",)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from multiprocessing.connection import Connection
from typing import Any

from modelhost.perf.grpc_load import GrpcWorker
from modelhost.perf.http_load import HttpWorker
from modelhost.perf.specs import WorkerSpec
from modelhost.perf.worker_base import Worker


async def _serve(conn: Connection, spec: WorkerSpec) -> None:
    worker: Worker = HttpWorker(spec) if spec.protocol == "http" else GrpcWorker(spec)
    loop = asyncio.get_running_loop()
    commands: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()

    def readable() -> None:
        try:
            commands.put_nowait(conn.recv())
        except (EOFError, OSError):
            commands.put_nowait(("exit",))
            loop.remove_reader(conn.fileno())

    loop.add_reader(conn.fileno(), readable)
    # The loop made the pipe non-blocking; replies (a window's timestamps) can be larger than the pipe's buffer,
    # and Connection.send expects a blocking descriptor. Reads only happen once the pipe is readable.
    os.set_blocking(conn.fileno(), True)
    try:
        while True:
            command = await commands.get()
            kind = command[0]
            if kind == "exit":
                break
            try:
                if kind == "concurrency":
                    await worker.set_concurrency(int(command[1]))
                    conn.send(("ok",))
                elif kind == "rate":
                    await worker.start_rate(float(command[1]), str(command[2]), int(command[3]))
                    conn.send(("ok",))
                elif kind == "stop":
                    await worker.stop()
                    conn.send(("ok",))
                elif kind == "collect":
                    conn.send(worker.recorder.collect(int(command[1]), int(command[2])))
            except OSError as error:
                conn.send(("error", f"cannot connect to {spec.host}:{spec.port}: {error.strerror or error}"))
            except Exception as error:
                conn.send(("error", f"{type(error).__name__}: {error}"))
    finally:
        with contextlib.suppress(Exception):
            await worker.close()


def worker_main(conn: Connection, spec: WorkerSpec) -> None:
    """The entry point of a load-generator process."""
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
            asyncio.run(_serve(conn, spec))
        else:
            uvloop.run(_serve(conn, spec))
