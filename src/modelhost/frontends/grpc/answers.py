"""How a gRPC connection writes: a call's headers, its messages as DATA within the peer's flow-control windows
and the transport's backpressure, its status as trailers (or a trailers-only answer); everything queued is
written once per loop turn, however many calls answered in it. `dispatch.py` decides what to answer.

Memory stays bounded on this side: a call's DATA waits for the peer's window and for the transport to drain, so
a client that does not read holds its own calls back, not the server's memory.
"""

from __future__ import annotations

import asyncio
import collections
import logging

import grpc

from modelhost.frontends.grpc.calls import (
    ACCEPTED_ENCODINGS,
    CallContext,
    MessageReader,
    message_prefix,
    status_trailers,
)
from modelhost.frontends.grpc.http2 import Http2Server
from modelhost.frontends.grpc.http2_frames import ErrorCode, StreamClosed
from modelhost.frontends.grpc.keepalive import Keepalive
from modelhost.frontends.grpc.methods import Method

log = logging.getLogger("modelhost.grpc")

# Bytes written and not yet taken by the client's socket. Answers' DATA waits while the transport is paused, so
# only what the protocol answers by itself (SETTINGS and PING acknowledgements, statuses) can pass the transport's
# high-water mark: a client that floods those and never reads is cut off here, not held in memory.
MAX_UNREAD_BYTES = 32 << 20

_RESPONSE_HEADERS = [
    (b":status", b"200"),
    (b"content-type", b"application/grpc"),
    (b"grpc-accept-encoding", ACCEPTED_ENCODINGS),
]


class Call:
    """The server's state of one stream."""

    __slots__ = (
        "context",
        "deadline",
        "headers_sent",
        "id",
        "inbox",
        "message",
        "method",
        "reader",
        "received",
        "remote_ended",
        "task",
        "unacknowledged",
    )

    def __init__(self, stream_id: int, method: Method, reader: MessageReader, context: CallContext) -> None:
        self.id = stream_id
        self.method = method
        self.reader = reader
        self.context = context
        self.task: asyncio.Task[None] | None = None
        self.headers_sent = False
        self.deadline: asyncio.TimerHandle | None = None
        # Streaming calls: messages received and not read yet (None: the client finished sending).
        self.inbox: collections.deque[bytes | None] | None = None
        self.received = 0  # bytes received since this call's window was last reopened
        self.unacknowledged = 0  # bytes received and held back from the client's window
        self.remote_ended = False  # the client has sent END_STREAM
        self.message: bytes | None = None  # a unary call's request, once it has arrived


class AnswerWriter(asyncio.Protocol):
    """The writing side of a connection: its HTTP/2 state, its transport, and the calls it may still answer."""

    __slots__ = (
        "calls",
        "can_write",
        "closed",
        "flush_scheduled",
        "going_away",
        "http2",
        "keepalive",
        "loop",
        "transport",
        "window_waiters",
    )

    def __init__(self, http2: Http2Server, keepalive: Keepalive, loop: asyncio.AbstractEventLoop) -> None:
        self.http2 = http2
        self.keepalive = keepalive
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.calls: dict[int, Call] = {}
        self.flush_scheduled = False
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.window_waiters: list[asyncio.Future[None]] = []
        self.closed = False
        self.going_away = False  # GOAWAY sent: no new calls

    # -- the transport's and the peer's flow control -----------------------------------------------------------

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def on_window_opened(self) -> None:
        self._wake_window_waiters()

    def _wake_window_waiters(self) -> None:
        waiters, self.window_waiters = self.window_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- answers -----------------------------------------------------------------------------------------------

    def _send_headers(self, call: Call) -> None:
        call.headers_sent = True
        self.keepalive.answered()
        try:  # noqa: SIM105 (try is cheaper than contextlib.suppress on the hot path)
            self.http2.send_headers(call.id, _RESPONSE_HEADERS)
        except StreamClosed:
            pass  # reset or connection gone; the call is dropped below
        self._schedule_flush()

    async def _send(self, call: Call, payload: bytes) -> None:
        """One message as DATA (its 5-byte prefix, then the payload), as the peer's window and the transport allow.

        Each frame takes its slice of the payload: a large answer is not first copied whole behind its prefix.
        """
        self.keepalive.answered()
        http2 = self.http2
        prefix = message_prefix(len(payload))
        view = memoryview(payload)
        offset, total = 0, 5 + len(payload)  # offsets in the message with its prefix
        while offset < total:
            if self.closed or call.id not in self.calls:
                return
            if not self.can_write.is_set():
                await self.can_write.wait()
                continue
            try:
                window = http2.window(call.id)
            except StreamClosed:
                return
            if window <= 0:
                waiter = self.loop.create_future()
                self.window_waiters.append(waiter)
                await waiter
                continue
            size = min(window, http2.max_outbound_frame_size, total - offset)
            if offset < 5:  # the frame that carries (the rest of) the prefix
                head = prefix[offset : offset + size]
                chunk: bytes | memoryview = head + view[: size - len(head)]
            else:
                chunk = view[offset - 5 : offset - 5 + size]
            try:
                http2.send_data(call.id, chunk)
            except StreamClosed:
                return
            offset += size
            self._schedule_flush()

    def _answer_status(
        self, stream_id: int, code: grpc.StatusCode, message: str, *, reset: bool = False
    ) -> None:
        """A trailers-only answer: one HEADERS frame with the status, ending the stream."""
        self.keepalive.answered()
        headers = [
            (b":status", b"200"),
            (b"content-type", b"application/grpc"),
            *status_trailers(code, message),
        ]
        try:
            self.http2.send_headers(stream_id, headers, end_stream=True)
            if reset:
                self.http2.reset_stream(stream_id, ErrorCode.NO_ERROR)
        except StreamClosed:
            pass
        self._schedule_flush()

    def _answer_http_error(self, stream_id: int, status: bytes, *, reset: bool) -> None:
        try:
            self.http2.send_headers(stream_id, [(b":status", status)], end_stream=True)
            if reset:  # the client is still sending: it may stop now
                self.http2.reset_stream(stream_id, ErrorCode.NO_ERROR)
        except StreamClosed:
            pass
        self._schedule_flush()

    # -- writing -----------------------------------------------------------------------------------------------

    def _schedule_flush(self) -> None:
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write what is queued, once per loop turn however many calls answered in it."""
        self.flush_scheduled = False
        data = self.http2.data_to_send()
        transport = self.transport
        if data and transport is not None and not transport.is_closing():
            transport.write(data)
            if not self.can_write.is_set() and transport.get_write_buffer_size() > MAX_UNREAD_BYTES:
                log.warning(
                    "closing a gRPC connection: its client left %d bytes of answers unread", MAX_UNREAD_BYTES
                )
                transport.abort()

    def go_away(self, code: ErrorCode = ErrorCode.NO_ERROR, debug: bytes = b"") -> None:
        """Send GOAWAY naming the last call we take, while the calls in flight may still be answered."""
        if self.going_away or self.transport is None or self.transport.is_closing():
            return
        self.going_away = True
        self.http2.send_goaway(code, debug)
        self.flush()

    def close(self) -> None:
        self.http2.stopped = True  # the rest of what arrived is not parsed
        if self.transport is not None and not self.transport.is_closing():
            self.flush()
            self.transport.close()
