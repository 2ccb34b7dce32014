"""The engine's end of the link: serves the calls of the frontend processes against the in-process core.

An `InferCall` becomes an `InferenceRequest` over the frame's bytes and goes to `Server.infer`, exactly as the
single-process HTTP route would send it; an `HttpCall` goes through the engine's own `HttpRoutes`, so every other
endpoint answers exactly as before. Failures are logged and counted here, once, whichever frontend received them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable, Coroutine
from typing import Any

import msgspec

from modelhost.engine_api import CallContext
from modelhost.errors import ModelhostError
from modelhost.frontends.http.protocol import HttpRequest, HttpResponse, error_response
from modelhost.frontends.http.routes import HttpRoutes, failure_response
from modelhost.server import Server
from modelhost.transport.framing import FramedProtocol
from modelhost.transport.messages import (
    FrontendMessage,
    Hello,
    HttpCall,
    HttpReply,
    InferCall,
    InferReply,
    Refused,
)
from modelhost.transport.tensors import from_wire, to_wire
from modelhost.types import InferenceRequest, InferenceResponse, RequestedOutput

log = logging.getLogger("modelhost.transport")
http_log = logging.getLogger("modelhost.http")


def _reply_of(call: int, response: InferenceResponse) -> InferReply:
    return InferReply(
        call,
        response.model_name,
        response.model_version,
        response.id,
        [to_wire(t) for t in response.outputs],
        response.parameters,
    )


def _http_reply(call: int, response: HttpResponse) -> HttpReply:
    return HttpReply(
        call, response.status, memoryview(response.body), response.content_type, response.headers
    )


class EngineConnection(FramedProtocol[FrontendMessage]):
    """One frontend process's connection: each call runs as its own task and is answered when it completes."""

    def __init__(self, service: EngineService) -> None:
        super().__init__(msgspec.msgpack.Decoder(FrontendMessage))
        self.service = service
        self.tasks: set[asyncio.Task[None]] = set()

    def received(self, message: FrontendMessage) -> None:
        if isinstance(message, Hello):
            self.service.hello(message)
            return
        if isinstance(message, Refused):
            self.service.refused(message)
            return
        loop = asyncio.get_running_loop()
        coroutine = self._infer(message) if isinstance(message, InferCall) else self._http(message)
        if not self.service.opened.is_set():
            coroutine = self.service.when_open(coroutine)
        task = loop.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def connection_lost(self, exc: Exception | None) -> None:
        # The frontend died or stopped: its requests already queued here run on (their answers are dropped), as
        # the requests of a client that went away do in the single-process server.
        self.transport = None
        self.service.connections.discard(self)

    async def _http(self, call: HttpCall) -> None:
        request = HttpRequest(
            call.method,
            call.path,
            call.query,
            call.headers,
            bytes(call.body),
            call.too_large,
            call.received_ns,
        )
        try:
            response = await self.service.routes(request)
            if response.stream is not None:
                # The link carries one reply per call: a streamed answer (generate_stream) reaches a client of a
                # frontend process whole, once the model has finished (docs/frontend-processes.md).
                response.body = b"".join([piece async for piece in response.stream])
                response.stream = None
        except Exception:  # as the HTTP protocol does: a bug in a handler answers 500 and nothing else fails
            log.exception("unhandled error serving %s %s", call.method, call.path)
            response = error_response(500, "internal server error")
        self._answer(_http_reply(call.call, response))

    async def _infer(self, call: InferCall) -> None:
        if http_log.isEnabledFor(logging.DEBUG):
            http_log.debug("HTTP request: POST %s", call.path)  # Triton's verbose line
        try:
            request = InferenceRequest(
                model_name=call.model,
                model_version=call.version,
                id=call.request_id,
                inputs=[from_wire(t, call.model, call.request_id) for t in call.inputs],
                outputs=[RequestedOutput(o.name, parameters=o.parameters) for o in call.outputs],
                parameters=call.parameters,
                priority=call.priority,
                timeout_us=call.timeout_us,
            )
            server = self.service.server
            response = await server.infer(request, CallContext("HTTP", call.received_ns, call.traceparent))
            send_started = time.monotonic_ns()
            reply: InferReply | HttpReply = _reply_of(call.call, response)
            server.sent(request, send_started)
        except ModelhostError as e:
            reply = _http_reply(call.call, failure_response("POST", call.path, e))
        except Exception:
            log.exception("unhandled error serving POST %s", call.path)
            reply = _http_reply(call.call, error_response(500, "internal server error"))
        self._answer(reply)

    def _answer(self, reply: InferReply | HttpReply) -> None:
        if self.transport is not None:
            self.send(reply)


class EngineService:
    """Listens for frontend processes on a Unix socket and serves their calls."""

    def __init__(
        self,
        server: Server,
        routes: HttpRoutes,
        on_hello: Callable[[Hello], None],
    ) -> None:
        self.server = server
        self.routes = routes
        self.hello = on_hello
        self.connections: set[EngineConnection] = set()
        # Calls wait until the whole server has started (gRPC and metrics too): a frontend that listens early
        # must not report the server ready before then.
        self.opened = asyncio.Event()
        self._listener: asyncio.AbstractServer | None = None
        # The abstract socket namespace: nothing on disk to leak when the engine is killed.
        self.address = f"\0modelhost-engine-{os.getpid()}-{os.urandom(4).hex()}"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()

        def factory() -> EngineConnection:
            connection = EngineConnection(self)
            self.connections.add(connection)
            return connection

        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(self.address)  # uvloop takes no abstract-namespace address itself, but takes the socket
        self._listener = await loop.create_unix_server(factory, sock=sock, backlog=128)

    async def when_open(self, call: Coroutine[Any, Any, None]) -> None:
        await self.opened.wait()
        await call

    def refused(self, message: Refused) -> None:
        """A request a frontend refused itself (its buffer was full): counted as Triton counts a rejection."""
        try:
            model = self.server.registry.get(message.model, message.version)
        except ModelhostError:
            return
        model.stats.failed(0, "REJECTED")

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        for connection in list(self.connections):
            connection._abort()
