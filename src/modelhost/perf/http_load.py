"""The HTTP load generator: raw HTTP/1.1 keep-alive connections driven by protocol callbacks (no coroutine per
request); in concurrency mode each connection sends its next request from the callback that completes the
previous answer."""

from __future__ import annotations

import asyncio
import time
from typing import cast

from modelhost.perf.specs import WorkerSpec
from modelhost.perf.worker_base import Worker

MAX_RATE_CONNECTIONS = 1024


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
        self.record = True  # False for the requests that end open sequences between levels
        self.slot = worker.new_slot()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def send(self) -> None:
        w = self.worker
        if self.slot is not None:
            request = self.slot.next()
        else:
            request = w.requests[w.next_index]
            w.next_index = (w.next_index + 1) % len(w.requests)
        self.write(request)

    def write(self, request: bytes) -> None:
        w = self.worker
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
        if self.record:
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


class HttpWorker(Worker):
    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        self.connections: list[HttpConnection] = []
        self.idle_connections: list[HttpConnection] = []
        self.opening = 0
        self.tasks: set[asyncio.Task[None]] = set()
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
            task = asyncio.get_running_loop().create_task(self._open_and_send())
            self.tasks.add(task)  # a reference until it ends (the loop keeps only weak ones)
            task.add_done_callback(self.tasks.discard)
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
        await self._settle()
        if self.spec.sequence is not None:
            for connection in self.connections:
                request = connection.slot.close() if connection.slot is not None else None
                if request is not None and not connection.dead:
                    connection.record = False
                    connection.write(request)
            await self._settle()
            for connection in self.connections:
                connection.record = True
                if connection.slot is not None:
                    connection.slot.release()
        self.idle_connections = [c for c in self.connections if not c.dead and not c.busy]

    async def _settle(self) -> None:
        deadline = time.monotonic() + 30
        while (self.opening or any(c.busy for c in self.connections)) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    async def close(self) -> None:
        await self.stop()
        for connection in self.connections:
            if connection.transport is not None:
                connection.transport.close()
