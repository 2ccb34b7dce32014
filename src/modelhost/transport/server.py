"""The engine's end of the link: serves the `EngineAPI` calls of the frontend processes against the engine.

Each call runs as its own task and is answered when it completes; a `Cancel` cancels it (a client that went away,
a stream closed early). An `InferCall` becomes an `InferenceRequest` over the frame's bytes; an `ApiCall` names
one of the `EngineAPI` methods in `API_METHODS`. Nothing here knows HTTP or gRPC: the frontends speak them.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import socket
import time
from collections.abc import Callable, Coroutine
from typing import Any, cast

import msgspec

from modelhost.engine.engine import Engine
from modelhost.engine_api import RECEIVE_ACTIVITIES, CallContext, WireProtocol
from modelhost.errors import ModelhostError
from modelhost.transport.framing import FramedProtocol
from modelhost.transport.messages import (
    CHECK,
    STREAM,
    ApiCall,
    ApiReply,
    Cancel,
    ErrorReply,
    FrontendMessage,
    Hello,
    InferCall,
    InferReply,
    LogSettingsChanged,
    Refused,
    StreamEnd,
)
from modelhost.transport.tensors import reply_of, request_of
from modelhost.types import InferenceRequest

log = logging.getLogger("modelhost.transport")

# The EngineAPI methods an ApiCall may name (inference has its own message).
API_METHODS = frozenset(
    {
        "is_live",
        "is_ready",
        "server_metadata",
        "model_ready",
        "model_metadata",
        "model_config",
        "model_signature",
        "statistics",
        "logging_settings",
        "trace_settings",
        "repository_index",
        "load_model",
        "unload_model",
        "reload_if_evicted",
        "register_models",
        "forget_models",
        "model_aliases",
        "settled",
        "check_shared_memory",
        "shared_memory_status",
        "register_system_shared_memory",
        "register_cuda_shared_memory",
        "unregister_shared_memory",
    }
)


def _error_reply(call: int, e: ModelhostError) -> ErrorReply:
    return ErrorReply(call, str(e.kind), type(e).__name__, e.message)


def _plain(method: str, value: Any) -> Any:
    """A method's result as msgpack carries it: the configuration as its serialized protobuf message, a model's
    signature as lists."""
    if method == "model_config":
        return value.SerializeToString()
    if method == "model_signature":
        inputs = [[s.name, s.datatype, list(s.dims), s.optional] for s in value.inputs.values()]
        return [value.name, value.version, inputs, value.max_batch_size, value.decoupled]
    return value


class EngineConnection(FramedProtocol[FrontendMessage]):
    """One frontend process's connection."""

    def __init__(self, service: EngineService) -> None:
        super().__init__(msgspec.msgpack.Decoder(FrontendMessage))
        self.service = service
        self.calls: dict[int, asyncio.Task[None]] = {}
        self.streams: set[int] = set()
        # A service with a token serves a connection only after a Hello that carries it.
        self.trusted = not service.token

    def received(self, message: FrontendMessage) -> None:
        if not self.trusted:
            if isinstance(message, Hello) and hmac.compare_digest(message.token, self.service.token):
                self.trusted = True
                return
            log.warning("closed an engine link that did not present the token")
            self._abort()
            return
        if isinstance(message, Hello):
            self.service.hello(message)
            return
        if isinstance(message, Refused):
            self.service.server.refused(message.model, message.version)
            return
        if isinstance(message, Cancel):
            task = self.calls.get(message.call)
            if task is not None:
                task.cancel()
            return
        coroutine = self._infer(message) if isinstance(message, InferCall) else self._api(message)
        if not self.service.opened.is_set():
            coroutine = self.service.when_open(coroutine)
        task = asyncio.get_running_loop().create_task(coroutine)
        call = message.call
        self.calls[call] = task
        if isinstance(message, InferCall) and message.mode == STREAM:
            self.streams.add(call)
        task.add_done_callback(lambda _: self._done(call))

    def _done(self, call: int) -> None:
        self.calls.pop(call, None)
        self.streams.discard(call)

    def connection_lost(self, exc: Exception | None) -> None:
        # The frontend died or stopped: its streams are cancelled (nobody reads them); its other requests run on
        # and their answers are dropped, as the requests of a client that went away do in the single-process
        # server.
        self.transport = None
        self.service.connections.discard(self)
        for call in list(self.streams):
            self.calls[call].cancel()

    async def _api(self, call: ApiCall) -> None:
        if call.method not in API_METHODS:
            log.error("a frontend called an unknown engine method %r", call.method)
            self._answer(
                ErrorReply(call.call, "INTERNAL", "InternalError", f"no engine method {call.method!r}")
            )
            return
        server = self.service.server
        try:
            value = await getattr(server, call.method)(*call.args, **call.kwargs)
        except ModelhostError as e:
            self._answer(_error_reply(call.call, e))
            return
        except Exception:
            log.exception("unhandled error serving the engine call %s", call.method)
            self._answer(ErrorReply(call.call, "INTERNAL", "InternalError", "internal server error"))
            return
        if call.method == "logging_settings":
            changes = call.args[0] if call.args else call.kwargs.get("changes")
            if changes:
                self.service.broadcast(LogSettingsChanged(changes))
        self._answer(ApiReply(call.call, _plain(call.method, value)))

    async def _infer(self, call: InferCall) -> None:
        server = self.service.server
        context = None
        if call.protocol in RECEIVE_ACTIVITIES:
            context = CallContext(cast(WireProtocol, call.protocol), call.received_ns, call.traceparent)
        try:
            request = request_of(call)
            if call.mode == CHECK:
                await server.check_request(request)
                self._answer(ApiReply(call.call, None))
            elif call.mode == STREAM:
                await self._stream(server, call.call, request, context)
            else:
                response = await server.infer(request, context)
                send_started = time.monotonic_ns()
                self._answer(reply_of(call.call, response))
                server.sent(request, send_started)
        except ModelhostError as e:
            self._answer(_error_reply(call.call, e))
        except Exception:
            log.exception("unhandled error serving an inference request of '%s'", call.model)
            self._answer(ErrorReply(call.call, "INTERNAL", "InternalError", "internal server error"))

    async def _stream(
        self, server: Engine, call: int, request: InferenceRequest, context: CallContext | None
    ) -> None:
        async for response in server.infer_stream(request, context):
            error = response.error
            if error is not None:
                e = error if isinstance(error, ModelhostError) else None
                item = InferReply(
                    call,
                    response.model_name,
                    response.model_version,
                    response.id,
                    [],
                    response.parameters,
                    (str(e.kind), type(e).__name__, e.message)
                    if e
                    else ("INTERNAL", "InternalError", str(error)),
                )
                self._answer(item)
                continue
            send_started = time.monotonic_ns()
            self._answer(reply_of(call, response))
            server.sent(request, send_started, last=False)
        self._answer(StreamEnd(call))

    def _answer(self, reply: InferReply | StreamEnd | ApiReply | ErrorReply | LogSettingsChanged) -> None:
        if self.transport is not None:
            self.send(reply)


class EngineService:
    """Listens for frontend processes on a Unix socket and serves their calls."""

    def __init__(self, server: Engine, on_hello: Callable[[Hello], None], token: str = "") -> None:
        self.server = server
        self.hello = on_hello
        # What a connection's first Hello must carry (a TCP link, open to the network: see start).
        self.token = token
        self.connections: set[EngineConnection] = set()
        # Calls wait until the whole server has started (gRPC and metrics too): a frontend that listens early
        # must not report the server ready before then.
        self.opened = asyncio.Event()
        self._listener: asyncio.AbstractServer | None = None
        # The abstract socket namespace: nothing on disk to leak when the engine is killed.
        self.address = f"\0modelhost-engine-{os.getpid()}-{os.urandom(4).hex()}"

    async def start(self, tcp_host: str | None = None) -> None:
        """Listen on the Unix socket, or with `tcp_host` on a free TCP port of that address (the replicas of a
        Ray deployment, which the ingress reaches from another machine); `address` says where."""
        loop = asyncio.get_running_loop()

        def factory() -> EngineConnection:
            connection = EngineConnection(self)
            self.connections.add(connection)
            return connection

        if tcp_host is not None:
            self._listener = await loop.create_server(factory, tcp_host, 0, backlog=128)
            port = self._listener.sockets[0].getsockname()[1]
            self.address = f"{tcp_host}:{port}"
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(self.address)  # uvloop takes no abstract-namespace address itself, but takes the socket
        self._listener = await loop.create_unix_server(factory, sock=sock, backlog=128)

    async def when_open(self, call: Coroutine[Any, Any, None]) -> None:
        await self.opened.wait()
        await call

    def broadcast(self, message: LogSettingsChanged) -> None:
        for connection in list(self.connections):
            connection._answer(message)

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        for connection in list(self.connections):
            connection._abort()
