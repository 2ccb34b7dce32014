"""A frontend process's end of the link: calls to the engine, each answered by a future."""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from collections.abc import Callable

import msgspec

from modelhost.transport.framing import FramedProtocol
from modelhost.transport.messages import EngineMessage, Hello, HttpCall, InferCall

log = logging.getLogger("modelhost.transport")


class EngineGone(Exception):
    """The engine closed the link: the calls in flight cannot be answered."""


class EngineClient(FramedProtocol[EngineMessage]):
    def __init__(self, on_lost: Callable[[], None]) -> None:
        super().__init__(msgspec.msgpack.Decoder(EngineMessage))
        self._calls = itertools.count(1)
        self._pending: dict[int, asyncio.Future[EngineMessage]] = {}
        self._on_lost = on_lost
        self.connected = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.connected = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.connected = False
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(EngineGone("the engine process is gone"))
        self._on_lost()

    def received(self, message: EngineMessage) -> None:
        future = self._pending.pop(message.call, None)
        if future is not None and not future.done():
            future.set_result(message)

    def next_call(self) -> int:
        return next(self._calls)

    def hello(self, index: int, pid: int) -> None:
        self.send(Hello(index, pid))

    async def call(self, message: InferCall | HttpCall) -> EngineMessage:
        if not self.connected:
            raise EngineGone("the engine process is gone")
        future: asyncio.Future[EngineMessage] = asyncio.get_running_loop().create_future()
        self._pending[message.call] = future
        self.send(message)
        try:
            return await future
        finally:
            self._pending.pop(message.call, None)

    @property
    def in_flight(self) -> int:
        return len(self._pending)


async def connect(address: str, on_lost: Callable[[], None]) -> EngineClient:
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address)  # uvloop takes no abstract-namespace address itself, but takes the socket
    except OSError:
        sock.close()
        raise
    _, client = await loop.create_unix_connection(lambda: EngineClient(on_lost), sock=sock)
    return client
