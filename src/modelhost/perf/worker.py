"""Load-generator processes: each runs its own event loop and sends prebuilt requests.

HTTP: raw HTTP/1.1 keep-alive connections driven by protocol callbacks (no coroutine per request): in
concurrency mode each connection sends its next request from the callback that completes the previous
answer. gRPC: grpc.aio with the serialized request passed as bytes and the answer left unparsed.

The parent talks to a worker over a pipe, with tuples:

    ("concurrency", n)     keep n requests in flight (closed loop)        -> ("ok",) | ("error", msg)
    ("rate", r, dist, seed) send r requests/s, constant or poisson (open)  -> ("ok",) | ("error", msg)
    ("stop",)              send nothing new, wait for answers in flight   -> ("ok",)
    ("collect", t0, t1)    requests answered in [t0, t1) (time.monotonic_ns, the same clock in every process)
                           -> ("window", starts, ends, send_ns, recv_ns, timed, errors, first_error)
    ("exit",)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from array import array
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, cast

import numpy as np

MAX_RATE_CONNECTIONS = 1024


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    protocol: str  # "http" | "grpc"
    host: str
    port: int
    requests: list[bytes]  # HTTP: whole requests (head + body); gRPC: serialized ModelInferRequest
    grpc_method: str = ""


class Recorder:
    """Timestamps of answered requests, and the sums of client send/receive time."""

    def __init__(self) -> None:
        self.starts = array("q")
        self.ends = array("q")
        self.send_ns = 0
        self.recv_ns = 0
        self.errors = 0
        self.first_error = ""

    def error(self, message: str) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = message

    def collect(self, t0: int, t1: int) -> tuple[Any, ...]:
        starts = np.frombuffer(self.starts, dtype=np.int64).copy() if self.starts else np.zeros(0, np.int64)
        ends = np.frombuffer(self.ends, dtype=np.int64).copy() if self.ends else np.zeros(0, np.int64)
        inside = (ends >= t0) & (ends < t1)
        later = ends >= t1
        self.starts = array("q", starts[later].tobytes())
        self.ends = array("q", ends[later].tobytes())
        count = int(inside.sum())
        reply = (
            "window",
            starts[inside].tobytes(),
            ends[inside].tobytes(),
            self.send_ns,
            self.recv_ns,
            count,
            self.errors,
            self.first_error,
        )
        self.send_ns = self.recv_ns = 0
        return reply


def _response_end(data: bytes) -> int:
    """The length of the first complete HTTP/1.1 response in data, or -1 while it is incomplete."""
    head_end = data.find(b"\r\n\r\n")
    if head_end < 0:
        return -1
    head = data[:head_end].lower()
    body_start = head_end + 4
    i = head.find(b"\r\ncontent-length:")
    if i >= 0:
        j = head.find(b"\r\n", i + 17)
        length = int(head[i + 17 : j if j >= 0 else len(head)])
        end = body_start + length
        return end if len(data) >= end else -1
    if b"\r\ntransfer-encoding:" in head and b"chunked" in head:
        pos = body_start
        while True:
            line_end = data.find(b"\r\n", pos)
            if line_end < 0:
                return -1
            size = int(data[pos:line_end].split(b";", 1)[0], 16)
            pos = line_end + 2
            if size == 0:
                trailer_end = data.find(b"\r\n", pos)
                while trailer_end > pos:  # trailers, if any, end with an empty line
                    pos = trailer_end + 2
                    trailer_end = data.find(b"\r\n", pos)
                return pos + 2 if trailer_end >= 0 else -1
            pos += size + 2
            if pos > len(data):
                return -1
    return body_start  # no body


class HttpConnection(asyncio.Protocol):
    def __init__(self, worker: HttpWorker) -> None:
        self.worker = worker
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.active = False  # closed loop: send the next request on each answer
        self.busy = False
        self.start = 0
        self.dead = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def send(self) -> None:
        w = self.worker
        request = w.requests[w.next_index]
        w.next_index = (w.next_index + 1) % len(w.requests)
        self.busy = True
        self.start = start = time.monotonic_ns()
        assert self.transport is not None
        self.transport.write(request)
        w.recorder.send_ns += time.monotonic_ns() - start

    def data_received(self, data: bytes) -> None:
        arrived = time.monotonic_ns()
        if self.buffer:
            data = self.buffer + data
        end = _response_end(data)
        if end < 0:
            self.buffer = data
            return
        w = self.worker
        rec = w.recorder
        if data[9:12] != b"200":
            rec.error(
                "HTTP " + data[9 : data.find(b"\r\n")].decode(errors="replace") + _error_text(data, end)
            )
        done = time.monotonic_ns()
        rec.starts.append(self.start)
        rec.ends.append(done)
        rec.recv_ns += done - arrived
        self.buffer = data[end:]
        self.busy = False
        if self.active:
            self.send()
        else:
            w.idle(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.dead = True
        if self.busy or self.active:
            self.worker.recorder.error(f"connection closed by the server ({exc or 'EOF'})")
        self.busy = False
        self.worker.idle(self)


def _error_text(data: bytes, end: int) -> str:
    body = data[data.find(b"\r\n\r\n") + 4 : end]
    text = " ".join(body[:300].decode(errors="replace").split())
    return f": {text}" if text else ""


class Worker:
    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.requests = spec.requests
        self.next_index = 0
        self.recorder = Recorder()
        self.rate_task: asyncio.Task[None] | None = None

    async def set_concurrency(self, n: int) -> None:
        raise NotImplementedError

    async def start_rate(self, rate: float, distribution: str, seed: int) -> None:
        await self.stop()
        self.rate_task = asyncio.get_running_loop().create_task(self._rate_loop(rate, distribution, seed))

    async def _rate_loop(self, rate: float, distribution: str, seed: int) -> None:
        rng = random.Random(seed)
        interval_ns = 1e9 / rate
        next_at = float(time.monotonic_ns())
        while True:
            now = time.monotonic_ns()
            while next_at <= now:
                self.fire()
                next_at += rng.expovariate(1.0) * interval_ns if distribution == "poisson" else interval_ns
            await asyncio.sleep((next_at - time.monotonic_ns()) / 1e9)

    def fire(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        if self.rate_task is not None:
            self.rate_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.rate_task
            self.rate_task = None

    async def close(self) -> None:
        await self.stop()


class HttpWorker(Worker):
    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        self.connections: list[HttpConnection] = []
        self.idle_connections: list[HttpConnection] = []
        self.opening = 0
        self.backlog = 0  # requests due while every connection was busy (rate mode)

    async def _open(self) -> HttpConnection:
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(
            lambda: HttpConnection(self), self.spec.host, self.spec.port
        )
        self.connections.append(protocol)
        return protocol

    async def set_concurrency(self, n: int) -> None:
        await self.stop()
        self.connections = [c for c in self.connections if not c.dead]
        while len(self.connections) < n:
            await self._open()
        for connection in self.connections[:n]:
            connection.active = True
            connection.send()

    def idle(self, connection: HttpConnection) -> None:
        if connection.dead:
            return
        if self.backlog > 0:
            self.backlog -= 1
            connection.send()
        else:
            self.idle_connections.append(connection)

    def fire(self) -> None:
        while self.idle_connections:
            connection = self.idle_connections.pop()
            if not connection.dead:
                connection.send()
                return
        if len(self.connections) + self.opening < MAX_RATE_CONNECTIONS:
            self.opening += 1
            asyncio.get_running_loop().create_task(self._open_and_send())
        else:
            self.backlog += 1

    async def _open_and_send(self) -> None:
        try:
            connection = await self._open()
        except OSError as error:
            self.recorder.error(
                f"cannot connect to {self.spec.host}:{self.spec.port}: {error.strerror or error}"
            )
            return
        finally:
            self.opening -= 1
        connection.send()

    async def stop(self) -> None:
        await super().stop()
        self.backlog = 0
        for connection in self.connections:
            connection.active = False
        deadline = time.monotonic() + 30
        while (self.opening or any(c.busy for c in self.connections)) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        self.idle_connections = [c for c in self.connections if not c.dead and not c.busy]

    async def close(self) -> None:
        await self.stop()
        for connection in self.connections:
            if connection.transport is not None:
                connection.transport.close()


class GrpcWorker(Worker):
    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        import grpc.aio

        self.channel = grpc.aio.insecure_channel(
            f"{spec.host}:{spec.port}",
            options=[("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)],
        )
        self.call = self.channel.unary_unary(spec.grpc_method)
        self.loops: list[asyncio.Task[None]] = []
        self.in_flight: set[asyncio.Task[None]] = set()
        self.active = False

    async def _one(self) -> None:
        import grpc

        request = self.requests[self.next_index]
        self.next_index = (self.next_index + 1) % len(self.requests)
        start = time.monotonic_ns()
        try:
            await self.call(request)
        except grpc.aio.AioRpcError as error:
            self.recorder.error(f"gRPC {error.code().name}: {error.details()}")
        except asyncio.CancelledError:
            raise
        end = time.monotonic_ns()
        self.recorder.starts.append(start)
        self.recorder.ends.append(end)

    async def _loop(self) -> None:
        while self.active:
            await self._one()

    async def set_concurrency(self, n: int) -> None:
        await self.stop()
        await self.channel.channel_ready()
        self.active = True
        loop = asyncio.get_running_loop()
        self.loops = [loop.create_task(self._loop()) for _ in range(n)]

    def fire(self) -> None:
        task = asyncio.get_running_loop().create_task(self._one())
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)

    async def start_rate(self, rate: float, distribution: str, seed: int) -> None:
        await self.channel.channel_ready()
        await super().start_rate(rate, distribution, seed)

    async def stop(self) -> None:
        await super().stop()
        self.active = False
        pending = [*self.loops, *self.in_flight]
        if pending:
            await asyncio.wait(pending, timeout=30)
        self.loops = []

    async def close(self) -> None:
        await self.stop()
        await self.channel.close()


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
