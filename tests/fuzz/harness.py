"""The server in this process, on an event loop of its own thread: a real engine over ONNX models, the HTTP
protocol and routes, the gRPC service and connection, fed bytes or messages directly (no sockets), so that
thousands of examples take seconds. Every call has a time limit: a hang fails the example."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from frontends.http.fake_transport import FakeTransport
from modelhost.backends.api import BackendServices
from modelhost.engine.engine import Engine
from modelhost.engine.registry.entries import LoadSettings
from modelhost.engine.registry.registry import ModelRegistry
from modelhost.engine.shared_memory import SharedMemoryRegistry
from modelhost.frontends.grpc.service import GrpcService
from modelhost.frontends.http.protocol import HttpProtocol
from modelhost.frontends.http.routes import HttpRoutes
from modelhost.options.limits import HttpLimits
from modelhost.repository.sources import open_repository

T = TypeVar("T")
STATUS = re.compile(rb"HTTP/1\.1 (\d{3}) ")
# What a client may be answered: anything but a fault of the server's (500) or no answer.
SERVER_FAULT = 500


class ErrorLog(logging.Handler):
    """Every record at error level or with a traceback: a fault of the server's, whatever the client sent."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.records.append(record)

    def take(self) -> list[str]:
        found = [self.format(r) for r in self.records]
        self.records.clear()
        return found


class InProcessServer:
    def __init__(self, repo: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fuzzed-server", daemon=True)
        self.thread.start()
        self.errors = ErrorLog()
        logging.getLogger("modelhost").addHandler(self.errors)
        self.engine, self.routes, self.grpc = self.run(self._start(repo), timeout=120)

    async def _start(self, repo: Path) -> tuple[Engine, HttpRoutes, GrpcService]:
        services = BackendServices(loop=asyncio.get_running_loop())
        registry = ModelRegistry([open_repository(str(repo))], LoadSettings(), "none", services)
        engine = Engine(registry, shared_memory=SharedMemoryRegistry(allowed=True))
        await registry.start()
        return engine, HttpRoutes(engine, 1 << 20), GrpcService(engine)

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    async def http_exchange(self, chunks: list[bytes], half_close: bool) -> bytes:
        """What the server writes for these bytes on one connection, once it has answered all it can."""
        transport = FakeTransport()
        protocol = HttpProtocol(
            self.routes, HttpLimits(1 << 20, 16384, idle_timeout=60, request_timeout=60), set()
        )
        protocol.connection_made(transport)  # type: ignore[arg-type]
        for chunk in chunks:
            protocol.data_received(chunk)
            if transport.closed:
                break
        if half_close and not transport.closed and not protocol.eof_received():
            transport.close()
        worker = protocol.worker
        if worker is not None:
            # A hang fails here (the caller's own limit is longer).
            await asyncio.wait_for(asyncio.shield(worker), 20)
        assert not protocol.pending or protocol.closing, "requests left unanswered"
        protocol.connection_lost(None)
        return bytes(transport.written)

    def close(self) -> None:
        logging.getLogger("modelhost").removeHandler(self.errors)
        self.run(asyncio.to_thread(self.engine.close), timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()
