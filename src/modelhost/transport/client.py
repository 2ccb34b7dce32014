"""A frontend process's end of the link: `RemoteEngine`, the `EngineAPI` whose every call goes to the engine.

A unary call is answered by one future; a stream's answers arrive on a queue until its `StreamEnd`. A caller that
gives up (its task cancelled, a stream closed early) sends `Cancel`, so the engine cancels the request as it would
in process. The engine's traces are the engine's: `sent` has nothing to do here (the engine stamps the send when
it replies).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.datatypes import WIRE_TO_NUMPY
from modelhost.engine_api import CallContext, ModelSignature, ShmKind
from modelhost.errors import ModelhostError, Unavailable, error_from
from modelhost.io_specs import TensorSpec
from modelhost.transport.framing import FramedProtocol
from modelhost.transport.messages import (
    CHECK,
    STREAM,
    UNARY,
    ApiCall,
    ApiReply,
    Cancel,
    EngineMessage,
    ErrorReply,
    Hello,
    InferReply,
    LogSettingsChanged,
    Refused,
    StreamEnd,
)
from modelhost.transport.tensors import call_of, response_of
from modelhost.types import InferenceRequest, InferenceResponse

log = logging.getLogger("modelhost.transport")


class EngineGone(Unavailable):
    """The engine closed the link: the calls in flight cannot be answered."""

    def __init__(self, message: str = "the engine process is gone; the server is restarting") -> None:
        super().__init__(message)


def _error(reply: ErrorReply) -> ModelhostError:
    return error_from(reply.kind, reply.name, reply.message)


def _signature(value: list[Any]) -> ModelSignature:
    name, version, inputs, max_batch_size, decoupled = value
    specs = {
        n: TensorSpec(n, datatype, WIRE_TO_NUMPY[datatype], tuple(dims), None, optional)
        for n, datatype, dims, optional in inputs
    }
    return ModelSignature(name, version, specs, max_batch_size, decoupled)


def _context(context: CallContext | None) -> tuple[str, int, str]:
    if context is None:
        return "", 0, ""
    return context.protocol, context.received_ns, context.parent()


class RemoteEngine(FramedProtocol[EngineMessage]):
    """`EngineAPI` over the link (a structural implementation: see modelhost.engine_api)."""

    def __init__(
        self, on_lost: Callable[[], None], on_log_settings: Callable[[dict[str, Any]], object]
    ) -> None:
        super().__init__(msgspec.msgpack.Decoder(EngineMessage))
        self._calls = itertools.count(1)
        self._pending: dict[int, asyncio.Future[EngineMessage]] = {}
        self._streams: dict[int, asyncio.Queue[EngineMessage | None]] = {}
        self._on_lost = on_lost
        self._on_log_settings = on_log_settings
        self.connected = False
        # Whether a caller that gives up cancels its request in the engine: not once this process is stopping
        # (its exit cancels every task; the engine finishes their requests, as the single-process server does).
        self.cancels = True

    # -- the link ----------------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.connected = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.connected = False
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(EngineGone())
        streams, self._streams = self._streams, {}
        for queue in streams.values():
            queue.put_nowait(None)
        self._on_lost()

    def received(self, message: EngineMessage) -> None:
        if isinstance(message, LogSettingsChanged):
            self._on_log_settings(message.changes)
            return
        queue = self._streams.get(message.call)
        if queue is not None:
            queue.put_nowait(message)
            return
        future = self._pending.pop(message.call, None)
        if future is not None and not future.done():
            future.set_result(message)

    def close(self) -> None:
        """Close the link; calls in flight fail with EngineGone."""
        if self.transport is not None:
            self.transport.close()

    def hello(self, index: int, pid: int) -> None:
        self.send(Hello(index, pid))

    @property
    def in_flight(self) -> int:
        return len(self._pending) + len(self._streams)

    async def _call(self, message: Any) -> EngineMessage:
        if not self.connected:
            raise EngineGone()
        future: asyncio.Future[EngineMessage] = asyncio.get_running_loop().create_future()
        self._pending[message.call] = future
        self.send(message)
        try:
            return await future
        except asyncio.CancelledError:
            if self.connected and self.cancels:
                self.send(Cancel(message.call))
            raise
        finally:
            self._pending.pop(message.call, None)

    async def _api(self, method: str, *args: Any, **kwargs: Any) -> Any:
        reply = await self._call(ApiCall(next(self._calls), method, list(args), kwargs))
        if isinstance(reply, ErrorReply):
            raise _error(reply)
        assert isinstance(reply, ApiReply)
        return reply.value

    # -- inference ---------------------------------------------------------------------------------------------

    async def infer(self, request: InferenceRequest, context: CallContext | None = None) -> InferenceResponse:
        reply = await self._call(call_of(next(self._calls), UNARY, request, *_context(context)))
        if isinstance(reply, ErrorReply):
            raise _error(reply)
        assert isinstance(reply, InferReply)
        return response_of(reply)

    async def check_request(self, request: InferenceRequest) -> None:
        reply = await self._call(call_of(next(self._calls), CHECK, request, "", 0, ""))
        if isinstance(reply, ErrorReply):
            raise _error(reply)

    async def infer_stream(
        self, request: InferenceRequest, context: CallContext | None = None
    ) -> AsyncIterator[InferenceResponse]:
        if not self.connected:
            raise EngineGone()
        call = next(self._calls)
        queue: asyncio.Queue[EngineMessage | None] = asyncio.Queue()
        self._streams[call] = queue
        self.send(call_of(call, STREAM, request, *_context(context)))
        ended = False
        try:
            while True:
                message = await queue.get()
                if message is None:
                    raise EngineGone()
                if isinstance(message, StreamEnd):
                    ended = True
                    return
                if isinstance(message, ErrorReply):
                    ended = True
                    raise _error(message)
                assert isinstance(message, InferReply)
                response = response_of(message)
                if message.error is not None:
                    response.error = error_from(*message.error)
                yield response
        finally:
            self._streams.pop(call, None)
            if not ended and self.connected and self.cancels:
                self.send(Cancel(call))

    def sent(self, request: InferenceRequest, send_started_ns: int, *, last: bool = True) -> None:
        return None  # the engine stamps a traced request's send when it replies

    def refused(self, name: str, version: str) -> None:
        if self.connected:
            self.send(Refused(name, version))

    # -- everything else ---------------------------------------------------------------------------------------

    async def is_live(self) -> bool:
        return bool(await self._api("is_live"))

    async def is_ready(self) -> bool:
        return bool(await self._api("is_ready"))

    async def server_metadata(self) -> dict[str, Any]:
        return dict(await self._api("server_metadata"))

    async def model_ready(self, name: str, version: str = "") -> bool:
        return bool(await self._api("model_ready", name, version))

    async def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        return dict(await self._api("model_metadata", name, version))

    async def model_config(self, name: str, version: str = "") -> Any:
        config = ModelConfig()
        config.ParseFromString(await self._api("model_config", name, version))
        return config

    async def model_signature(self, name: str, version: str = "") -> ModelSignature:
        return _signature(await self._api("model_signature", name, version))

    async def statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        return list(await self._api("statistics", name, version))

    async def logging_settings(self, changes: dict[str, Any] | None = None) -> dict[str, Any]:
        return dict(await self._api("logging_settings", changes))

    async def trace_settings(self, model: str = "", changes: dict[str, Any] | None = None) -> dict[str, Any]:
        return dict(await self._api("trace_settings", model, changes))

    async def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        return list(await self._api("repository_index", ready_only))

    async def load_model(self, name: str, parameters: dict[str, Any], *, files_base64: bool) -> None:
        await self._api("load_model", name, parameters, files_base64=files_base64)

    async def unload_model(self, name: str, parameters: dict[str, Any]) -> None:
        await self._api("unload_model", name, parameters)

    async def reload_if_evicted(self, name: str) -> None:
        await self._api("reload_if_evicted", name)

    async def register_models(self, alias: str, url: str, names: dict[str, str]) -> None:
        await self._api("register_models", alias, url, names)

    async def forget_models(self, alias: str) -> None:
        await self._api("forget_models", alias)

    async def model_aliases(self, alias: str = "") -> dict[str, dict[str, Any]]:
        return dict(await self._api("model_aliases", alias))

    async def settled(self, timeout: float | None = None) -> bool:
        return bool(await self._api("settled", timeout))

    async def check_shared_memory(self, kind: ShmKind) -> None:
        await self._api("check_shared_memory", kind)

    async def shared_memory_status(self, kind: ShmKind, name: str = "") -> list[dict[str, Any]]:
        return list(await self._api("shared_memory_status", kind, name))

    async def register_system_shared_memory(self, name: str, key: str, offset: int, byte_size: int) -> None:
        await self._api("register_system_shared_memory", name, key, offset, byte_size)

    async def register_cuda_shared_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        await self._api("register_cuda_shared_memory", name, raw_handle, device_id, byte_size)

    async def unregister_shared_memory(self, kind: ShmKind, name: str = "") -> None:
        await self._api("unregister_shared_memory", kind, name)


async def connect(
    address: str,
    on_lost: Callable[[], None],
    on_log_settings: Callable[[dict[str, Any]], object],
    token: str = "",
) -> RemoteEngine:
    """The link to the engine at `address`: its Unix socket, or `host:port` (EngineService.start(tcp_host)),
    presenting `token` first."""
    loop = asyncio.get_running_loop()
    if not address.startswith("\0"):
        host, _, port = address.rpartition(":")
        _, remote = await loop.create_connection(
            lambda: RemoteEngine(on_lost, on_log_settings), host, int(port)
        )  # asyncio and uvloop set TCP_NODELAY on the connections they make
        remote.send(Hello(-1, os.getpid(), token))
        return remote
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address)  # uvloop takes no abstract-namespace address itself, but takes the socket
    except OSError:
        sock.close()
        raise
    _, engine = await loop.create_unix_connection(lambda: RemoteEngine(on_lost, on_log_settings), sock=sock)
    return engine
