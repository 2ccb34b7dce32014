"""A gRPC connection driven in memory: an h2 client on one side, `GrpcConnection` on the other."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions

from modelhost.frontends.grpc.connection import GrpcConnection, GrpcLimits
from modelhost.frontends.grpc.methods import Method


class MemoryTransport:
    """What the connection writes, kept; `close` reports the connection lost, as a real transport does."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self.protocol: GrpcConnection | None = None

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return len(self.written)  # what the peer has not read yet

    def abort(self) -> None:
        self.written.clear()
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            assert self.protocol is not None
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)


@dataclass
class Answer:
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    data: bytearray = field(default_factory=bytearray)
    trailers: list[tuple[bytes, bytes]] = field(default_factory=list)
    reset: int | None = None
    ended: bool = False

    def status(self) -> int | None:
        """grpc-status, from the trailers or a trailers-only answer."""
        for name, value in self.trailers or self.headers:
            if name == b"grpc-status":
                return int(value)
        return None

    def message(self) -> str:
        for name, value in self.trailers or self.headers:
            if name == b"grpc-message":
                return value.decode()
        return ""

    def messages(self) -> list[bytes]:
        out, data = [], bytes(self.data)
        while data:
            size = int.from_bytes(data[1:5], "big")
            out.append(data[5 : 5 + size])
            data = data[5 + size :]
        return out


def unary(handler: Callable[[bytes], Awaitable[bytes]], name: str = "M") -> Method:
    async def run(request: bytes, context: Any) -> bytes:
        return await handler(request)

    return Method(name=name, streaming=False, decode=bytes, handler=run, encode=bytes)


def request_headers(
    path: bytes, method: bytes = b"POST", extra: list[tuple[bytes, bytes]] | None = None
) -> list[tuple[bytes, bytes]]:
    """The headers a gRPC client opens a call with."""
    return [
        (b":method", method),
        (b":scheme", b"http"),
        (b":path", path),
        (b":authority", b"test"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
        *(extra or []),
    ]


def framed(payload: bytes, flag: int = 0) -> bytes:
    return bytes([flag]) + len(payload).to_bytes(4, "big") + payload


class Peer:
    def __init__(
        self,
        methods: dict[bytes, Method],
        max_message_size: int = 1 << 20,
        *,
        handshake: bool = True,
        max_decompressed_size: int | None = None,
        **timeouts: float,
    ) -> None:
        self.transport = MemoryTransport()
        limits = GrpcLimits(max_message_size, max_decompressed_size or max_message_size, **timeouts)
        self.server = GrpcConnection(methods, limits, set())
        self.transport.protocol = self.server
        self.server.connection_made(self.transport)  # type: ignore[arg-type]
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.h2.initiate_connection()
        self.answers: dict[int, Answer] = {}
        self.goaway: h2.events.ConnectionTerminated | None = None
        self.reading = True
        self.send()
        if handshake:
            self.receive()

    def send(self) -> None:
        data = self.h2.data_to_send()
        if data:
            self.server.data_received(data)

    def receive(self) -> None:
        data = bytes(self.transport.written)
        self.transport.written.clear()
        for event in self.h2.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                self._answer(event.stream_id).headers = list(event.headers)
            elif isinstance(event, h2.events.DataReceived):
                self._answer(event.stream_id).data += event.data
                if self.reading:  # as a client that reads does: the server may send more
                    with contextlib.suppress(h2.exceptions.StreamClosedError):
                        self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.TrailersReceived):
                self._answer(event.stream_id).trailers = list(event.headers)
            elif isinstance(event, h2.events.StreamEnded):
                self._answer(event.stream_id).ended = True
            elif isinstance(event, h2.events.StreamReset):
                self._answer(event.stream_id).reset = event.error_code
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.goaway = event
        self.send()  # SETTINGS acknowledgements and the like

    def _answer(self, stream_id: int) -> Answer:
        return self.answers.setdefault(stream_id, Answer())

    def start(
        self, path: bytes, extra: list[tuple[bytes, bytes]] | None = None, method: bytes = b"POST"
    ) -> int:
        stream_id = self.h2.get_next_available_stream_id()
        self.h2.send_headers(stream_id, request_headers(path, method, extra))
        self.send()
        return stream_id

    def call(self, path: bytes, payload: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> int:
        stream_id = self.start(path, extra)
        self.h2.send_data(stream_id, payload, end_stream=True)
        self.send()
        return stream_id

    async def settle(self, turns: int = 10) -> None:
        for _ in range(turns):
            await asyncio.sleep(0)
        self.receive()

    async def answer(self, stream_id: int, timeout: float = 5.0) -> Answer:
        async with asyncio.timeout(timeout):
            while True:
                await self.settle()
                answer = self.answers.get(stream_id)
                if answer is not None and (answer.ended or answer.reset is not None):
                    return answer
                await asyncio.sleep(0.005)
