"""A gRPC connection driven in memory: an h2 client on one side, `GrpcConnection` on the other; the methods the
connection tests call, and what reads the frames it wrote."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.events
import h2.exceptions
from hyperframe.frame import Frame

from modelhost.frontends.grpc.calls import AbortError
from modelhost.frontends.grpc.connection import GrpcConnection
from modelhost.frontends.grpc.methods import Method
from modelhost.options.limits import GrpcLimits

OK, CANCELLED, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND = 0, 1, 2, 3, 4, 5
RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE = 8, 12, 13, 14


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


class Handlers:
    """Methods under test; `cancelled` counts handlers stopped by a reset or a deadline."""

    def __init__(self) -> None:
        self.cancelled = 0
        self.received: list[bytes] = []
        self.release = asyncio.Event()

    async def echo(self, request: bytes) -> bytes:
        return request

    async def slow(self, request: bytes) -> bytes:
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return b"done"

    async def big(self, request: bytes) -> bytes:
        return b"x" * int(request)

    async def fail(self, request: bytes) -> bytes:
        raise AbortError(grpc.StatusCode.NOT_FOUND, "no model 'é' at 100%")

    async def bug(self, request: bytes) -> bytes:
        raise RuntimeError("a bug")

    async def full(self, request: bytes) -> bytes:
        raise AbortError(grpc.StatusCode.UNAVAILABLE, "Exceeds maximum queue size")

    async def long(self, request: bytes) -> bytes:
        """A NOT_FOUND naming a 64 KB model name, as the service words it."""
        raise AbortError(
            grpc.StatusCode.NOT_FOUND, f"Request for unknown model: '{'é' * 32_000}' is not found"
        )

    async def chat(self, requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        async for request in requests:
            self.received.append(request)
            yield request.upper()

    async def deaf(self, requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        """A streaming call that reads nothing until released."""
        await self.release.wait()
        async for request in requests:
            self.received.append(request)
        yield b"end"

    def methods(self) -> dict[bytes, Method]:
        table = {
            f"/t.S/{name.title()}".encode(): unary(getattr(self, name), name)
            for name in ("echo", "slow", "big", "fail", "bug", "long", "full")
        }
        for name in ("chat", "deaf"):
            table[f"/t.S/{name.title()}".encode()] = Method(name, True, bytes, getattr(self, name), bytes)
        return table


def run(test: Any) -> None:
    async def body() -> None:
        handlers = Handlers()
        await test(handlers, Peer(handlers.methods()))

    asyncio.run(body())


async def still_serving(peer: Peer) -> None:
    answer = await peer.answer(peer.call(b"/t.S/Echo", framed(b"ping")))
    assert answer.status() == OK and answer.messages() == [b"ping"]


def run_with(test: Any, **timeouts: float) -> None:
    async def body() -> None:
        handlers = Handlers()
        await test(handlers, Peer(handlers.methods(), **timeouts))

    asyncio.run(body())


def frames(data: bytearray) -> list[Frame]:
    out = []
    while data:
        frame, length = Frame.parse_frame_header(memoryview(data[:9]))
        frame.parse_body(memoryview(data[9 : 9 + length]))
        out.append(frame)
        data = data[9 + length :]
    return out


def frame_types(data: bytes) -> set[int]:
    """The types of the HTTP/2 frames in `data` (whole frames, from its start)."""
    types, offset = set(), 0
    while offset + 9 <= len(data):
        length = int.from_bytes(data[offset : offset + 3], "big")
        types.add(data[offset + 3])
        offset += 9 + length
    return types
