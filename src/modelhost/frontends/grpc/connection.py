"""One HTTP/2 connection of the gRPC server: `http2.py` for frames, HPACK and flow control; gRPC calls on top.

Chosen by measurement over grpc.aio (benchmarks/README.md, "gRPC"): grpc.aio's per-call machinery cost more
than everything else in a request, while this runs each call as one task on the server's own event loop.

Each stream is one call. A unary call starts its handler once the request's single message and END_STREAM
have arrived; a streaming call starts at once and reads its messages from an inbox. Memory stays bounded:
- received: at most MAX_CONCURRENT_STREAMS calls per connection, each message at most `max_message_size`, and
  a streaming call's unread messages held back by not acknowledging their bytes (the client's window closes);
- sent: a call's DATA waits for the peer's flow-control window and for the transport to drain, so a client that
  does not read holds its own calls back, not the server's memory.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import grpc
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

from modelhost.frontends.grpc.calls import (
    ACCEPTED_ENCODINGS,
    AbortError,
    CallContext,
    MessageReader,
    message_prefix,
    parse_timeout,
    status_trailers,
)
from modelhost.frontends.grpc.http2 import ErrorCode, Http2Server, ProtocolError, StreamClosed
from modelhost.frontends.grpc.methods import Method
from modelhost.observability.logs import RateLimitedLog

log = logging.getLogger("modelhost.grpc")

MAX_CONCURRENT_STREAMS = 1024
# Our receive windows: large enough that a big tensor is not held back by round trips of WINDOW_UPDATEs.
INITIAL_WINDOW = 16 * 1024 * 1024
MAX_FRAME_SIZE = 64 * 1024
# A request's header block, decoded (grpc's own hard limit on metadata is 16 KiB too).
MAX_HEADER_LIST_SIZE = 16 * 1024
# A streaming call's messages received and not yet read by its handler; past this its bytes are not acknowledged.
STREAM_INBOX = 64
# Client resets of streams per connection and second before the connection is closed (the "rapid reset" attack).
MAX_RESETS_PER_SECOND = 500
# Bytes written and not yet taken by the client's socket. Answers' DATA waits while the transport is paused, so
# only what the protocol answers by itself (SETTINGS and PING acknowledgements, statuses) can pass the transport's
# high-water mark: a client that floods those and never reads is cut off here, not held in memory.
MAX_UNREAD_BYTES = 32 << 20


@dataclasses.dataclass(frozen=True)
class GrpcLimits:
    """What one connection may send and for how long (each has a flag: docs/grpc.md)."""

    max_message_size: int = 2**31 - 1  # bytes of one message as sent, each way (Triton's limit)
    # Bytes a compressed message may inflate to (--grpc-max-decompressed-size).
    max_decompressed_size: int = 1 << 26
    # Seconds a connection may stay without a call before it is sent GOAWAY and closed (--grpc-idle-timeout-secs):
    # clients reconnect by themselves at their next call.
    idle_timeout: float = 300.0
    # Seconds a unary call's request may go without a byte before it is answered DEADLINE_EXCEEDED, and a new
    # connection may take to start its first call (--grpc-request-timeout-secs).
    request_timeout: float = 30.0
    # Open connections of this process (--grpc-max-connections); one more is closed at once.
    max_connections: int = 10_000
    # Keepalive and ping policy, tritonserver's flags with gRPC's defaults (milliseconds): the server pings a
    # connection silent for `keepalive_time` (only while it has calls, unless `keepalive_permit_without_calls`),
    # at most `max_pings_without_data` times between answers (0: no limit), and closes it when a ping is not
    # acknowledged within `keepalive_timeout`. A client's pings closer than `min_recv_ping_interval` (2 hours
    # while it has no call, unless permitted) are strikes; past `max_ping_strikes` (0: any number) it is sent
    # GOAWAY ENHANCE_YOUR_CALM "too_many_pings".
    keepalive_time: int = 7_200_000
    keepalive_timeout: int = 20_000
    keepalive_permit_without_calls: bool = False
    max_pings_without_data: int = 2
    min_recv_ping_interval: int = 300_000
    max_ping_strikes: int = 2
    # GOAWAY once a connection is this old, then closed after the grace (None: never).
    max_connection_age: int | None = None
    max_connection_age_grace: int | None = None


_refusals = RateLimitedLog()

_RESPONSE_HEADERS = [
    (b":status", b"200"),
    (b"content-type", b"application/grpc"),
    (b"grpc-accept-encoding", ACCEPTED_ENCODINGS),
]
_OK_TRAILERS = [(b"grpc-status", b"0")]


class _Call:
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


def _log_cancellation(call: _Call, why: str) -> None:
    if log.isEnabledFor(logging.DEBUG):  # Triton's verbose line, which its qa suites look for
        log.debug(
            "Cancellation notification received for %sHandler, stream %d: %s", call.method.name, call.id, why
        )


class GrpcConnection(asyncio.Protocol):
    def __init__(
        self, methods: dict[bytes, Method], limits: GrpcLimits, connections: set[GrpcConnection]
    ) -> None:
        self.methods = methods
        self.limits = limits
        self.connections = connections
        self.http2 = Http2Server(
            self,
            max_concurrent_streams=MAX_CONCURRENT_STREAMS,
            initial_window=INITIAL_WINDOW,
            max_frame_size=MAX_FRAME_SIZE,
            max_header_list_size=MAX_HEADER_LIST_SIZE,
        )
        self.transport: asyncio.Transport | None = None
        self.calls: dict[int, _Call] = {}
        self.loop = asyncio.get_running_loop()
        self.flush_scheduled = False
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.window_waiters: list[asyncio.Future[None]] = []
        self.inbox_waiters: dict[int, asyncio.Future[None]] = {}
        self.closed = False
        self.going_away = False  # GOAWAY sent: no new calls
        self.resets: collections.deque[float] = collections.deque()
        self.idle = asyncio.Event()
        self.idle.set()
        # The timeouts: one timer, moved on lazily (when it fires it checks these times and sets itself again if
        # the deadline moved), so that receiving bytes only reads the clock.
        self.timer: asyncio.TimerHandle | None = None
        # The last call started, request bytes received, or call ended: frames without a call (SETTINGS, PRIORITY,
        # an unknown type) do not keep a connection open past its idle and request timeouts.
        self.last_active = time.monotonic()
        self.any_call = False  # a call was started on this connection
        # Keepalive: our ping in flight (its payload) and its deadline, pings sent since our last answer; and the
        # client's pings: when the last came, and the strikes against it.
        self.keepalive: asyncio.TimerHandle | None = None
        self.ping_sent: bytes | None = None
        self.ping_deadline: asyncio.TimerHandle | None = None
        self.pings_without_data = 0
        self.last_ping_received = float("-inf")
        self.ping_strikes = 0
        self.age_timers: list[asyncio.TimerHandle] = []

    # -- asyncio.Protocol --------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        if len(self.connections) >= self.limits.max_connections:
            _refusals.note(
                log, f"{self.limits.max_connections} gRPC connections are open (--grpc-max-connections)"
            )
            self.closed = True
            self.transport.close()
            return
        self.connections.add(self)
        self.http2.initiate()
        self._flush()
        self._arm(min(self.limits.idle_timeout, self.limits.request_timeout))
        limits = self.limits
        self.keepalive = self.loop.call_later(limits.keepalive_time / 1000, self._keepalive)
        if limits.max_connection_age is not None:
            self.age_timers.append(self.loop.call_later(limits.max_connection_age / 1000, self._aged))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.connections.discard(self)
        self.can_write.set()
        for call in list(self.calls.values()):
            _log_cancellation(call, "the connection was lost")
            self._forget(call)
            if call.task is not None:
                call.task.cancel()
        self._wake_window_waiters()
        self.idle.set()
        for handle in (self.timer, self.keepalive, self.ping_deadline, *self.age_timers):
            if handle is not None:
                handle.cancel()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def data_received(self, data: bytes) -> None:
        try:
            self.http2.receive(data)  # calls the on_* methods below, frame by frame
        except ProtocolError as e:
            # A GOAWAY saying why is queued; send it and close.
            log.info("closing a gRPC connection: %s (%s)", e, e.code.name)
            self._flush()
            self.close()
            return
        self._flush()

    # -- timeouts ----------------------------------------------------------------------------------------------

    def _arm(self, delay: float) -> None:
        self.timer = self.loop.call_later(max(delay, 0.001), self._on_timer)

    def _on_timer(self) -> None:
        self.timer = None
        if self.closed or self.transport is None or self.transport.is_closing():
            return
        limits = self.limits
        now = time.monotonic()
        silent = now - self.last_active
        if not self.calls:
            limit = limits.idle_timeout if self.any_call else min(limits.idle_timeout, limits.request_timeout)
            if silent >= limit:
                log.info("closing a gRPC connection idle for %g s", limit)
                self.go_away()
                self.close()
            else:
                self._arm(limit - silent)
            return
        if silent >= limits.request_timeout:
            # Unary calls whose request stopped halfway; a streaming call may wait for its client as long as it
            # likes, and a call being answered has no timeout.
            for call in list(self.calls.values()):
                if call.task is None and call.inbox is None:
                    log.info("gRPC call to %s: no byte of its request for %g s", call.method.name, silent)
                    self._fail_early(
                        call,
                        AbortError(
                            grpc.StatusCode.DEADLINE_EXCEEDED,
                            f"no byte of the request for {limits.request_timeout:g} s",
                        ),
                    )
            self._flush()
            self._arm(limits.request_timeout)
        else:
            self._arm(limits.request_timeout - silent)

    # -- keepalive, the client's pings, connection age ------------------------------------------------------

    def _keepalive(self) -> None:
        limits = self.limits
        self.keepalive = None
        if self.closed or self.going_away:
            return
        silent_ms = (time.monotonic() - self.last_active) * 1000
        if (
            silent_ms >= limits.keepalive_time
            and self.ping_sent is None
            and (self.calls or limits.keepalive_permit_without_calls)
            and (
                limits.max_pings_without_data == 0 or self.pings_without_data < limits.max_pings_without_data
            )
        ):
            self.ping_sent = os.urandom(8)
            self.pings_without_data += 1
            self.http2.send_ping(self.ping_sent)
            self._flush()
            self.ping_deadline = self.loop.call_later(limits.keepalive_timeout / 1000, self._ping_unanswered)
            wait_ms = float(limits.keepalive_time)
        else:
            wait_ms = max(limits.keepalive_time - silent_ms, 1.0)
        self.keepalive = self.loop.call_later(wait_ms / 1000, self._keepalive)

    def _ping_unanswered(self) -> None:
        self.ping_deadline = None
        if self.ping_sent is not None and not self.closed:
            log.info(
                "closing a gRPC connection: no answer to a keepalive ping in %d ms (--grpc-keepalive-timeout)",
                self.limits.keepalive_timeout,
            )
            self.close()

    def on_ping_ack(self, payload: bytes) -> None:
        if payload == self.ping_sent:
            self.ping_sent = None
            if self.ping_deadline is not None:
                self.ping_deadline.cancel()
                self.ping_deadline = None

    def on_ping(self) -> None:
        """gRPC's ping abuse policy: pings closer together than allowed, with no answer of ours in between, are
        strikes (the ping is acknowledged already)."""
        limits = self.limits
        now = time.monotonic()
        idle = not self.calls and not limits.keepalive_permit_without_calls
        interval_s = 7200.0 if idle else limits.min_recv_ping_interval / 1000
        too_soon = now < self.last_ping_received + interval_s
        self.last_ping_received = now
        if not too_soon:
            return
        self.ping_strikes += 1
        if limits.max_ping_strikes and self.ping_strikes > limits.max_ping_strikes:
            log.warning(
                "closing a gRPC connection: too many pings (%d too soon; --grpc-http2-max-ping-strikes)",
                self.ping_strikes,
            )
            self.go_away(ErrorCode.ENHANCE_YOUR_CALM, b"too_many_pings")
            self.close()

    def _answered(self) -> None:
        """We sent headers or data: the ping counts start again, as gRPC's do."""
        self.ping_strikes = 0
        self.last_ping_received = float("-inf")
        self.pings_without_data = 0

    def _aged(self) -> None:
        if self.closed:
            return
        log.info("a gRPC connection reached its maximum age (--grpc-max-connection-age): GOAWAY")
        self.go_away()
        grace = self.limits.max_connection_age_grace
        if not self.calls:
            self.close()
        elif grace is not None:
            self.age_timers.append(self.loop.call_later(grace / 1000, self.close))

    # -- inbound events ----------------------------------------------------------------------------------------

    def on_request(self, stream_id: int, headers: list[tuple[bytes, bytes]], end_stream: bool) -> None:
        self.last_active = time.monotonic()
        if self.going_away:
            self.http2.reset_stream(stream_id, ErrorCode.REFUSED_STREAM)
            return
        path = method_name = b""
        content_type = encoding = timeout = None
        for name, value in headers:
            if name == b":path":
                path = value
            elif name == b":method":
                method_name = value
            elif name == b"content-type":
                content_type = value
            elif name == b"grpc-encoding":
                encoding = value
            elif name == b"grpc-timeout":
                timeout = value
        if method_name != b"POST":
            self._answer_http_error(stream_id, b"405", reset=not end_stream)
            return
        if content_type is None or not content_type.startswith(b"application/grpc"):
            self._answer_http_error(stream_id, b"415", reset=not end_stream)
            return
        method = self.methods.get(path)
        if method is None:
            log.info("unknown gRPC method %s", path.decode("latin-1"))
            self._answer_status(
                stream_id, grpc.StatusCode.UNIMPLEMENTED, "Method not found!", reset=not end_stream
            )
            return
        try:
            reader = MessageReader(encoding, self.limits.max_message_size, self.limits.max_decompressed_size)
            seconds = parse_timeout(timeout) if timeout is not None else None
        except AbortError as e:
            log.info("refused a gRPC call to %s: %s", path.decode("latin-1"), e.message)
            self._answer_status(stream_id, e.code, e.message, reset=not end_stream)
            return
        call = _Call(stream_id, method, reader, CallContext(headers))
        self.calls[stream_id] = call
        self.any_call = True
        self.idle.clear()
        if seconds is not None:
            call.deadline = self.loop.call_later(seconds, self._deadline_expired, call)
        if method.streaming:
            call.inbox = collections.deque()
            call.task = self.loop.create_task(self._run(call, self._streaming))

    def on_data(self, stream_id: int, data: bytes, size: int) -> None:
        """`size`: the bytes the frame took of the client's windows (its padding included)."""
        self.last_active = time.monotonic()
        call = self.calls.get(stream_id)
        if call is None:  # answered already (a refused call), the rest of its request is dropped
            return
        try:
            messages = call.reader.feed(data)
        except AbortError as e:
            log.info("gRPC call to %s refused: %s", call.method.name, e.message)
            self._fail_early(call, e)
            return
        inbox = call.inbox
        if inbox is None:  # unary: one message
            self._acknowledge_stream(call, size)
            if messages:
                if call.message is not None or len(messages) > 1:
                    self._fail_early(
                        call, AbortError(grpc.StatusCode.UNIMPLEMENTED, "More than one request message")
                    )
                    return
                call.message = messages[0]
            return
        inbox.extend(messages)
        if len(inbox) < STREAM_INBOX and not call.unacknowledged:
            self._acknowledge_stream(call, size)
        else:  # held back from this call's window only: the connection's other calls go on
            call.unacknowledged += size
        self._wake_inbox(stream_id)

    def on_end(self, stream_id: int) -> None:
        call = self.calls.get(stream_id)
        if call is None:
            return
        call.remote_ended = True
        try:
            call.reader.finish()
        except AbortError as e:
            self._fail_early(call, e)
            return
        if call.inbox is not None:
            call.inbox.append(None)
            self._wake_inbox(call.id)
            return
        message, call.message = call.message, None
        if message is None:
            self._fail_early(call, AbortError(grpc.StatusCode.UNIMPLEMENTED, "No request message"))
            return
        call.task = self.loop.create_task(self._run(call, self._unary, message))

    def on_reset(self, stream_id: int, code: int) -> None:
        now = time.monotonic()
        self.resets.append(now)
        while self.resets and self.resets[0] < now - 1.0:
            self.resets.popleft()
        if len(self.resets) > MAX_RESETS_PER_SECOND:
            log.warning(
                "closing a gRPC connection: more than %d stream resets a second", MAX_RESETS_PER_SECOND
            )
            self.go_away(ErrorCode.ENHANCE_YOUR_CALM)
            self.close()
        call = self.calls.get(stream_id)
        if call is not None:  # the client cancelled the call
            _log_cancellation(call, "the client reset the stream")
            self._forget(call)
            if call.task is not None:
                call.task.cancel()
            self._wake_inbox(call.id)

    def on_window_opened(self) -> None:
        self._wake_window_waiters()

    def on_goaway(self, code: int) -> None:
        if code != ErrorCode.NO_ERROR or not self.calls:
            self.close()  # an error: the client reads no more, so what is in flight cannot be answered
            return
        # A client shutting down gracefully (grpc-java's `shutdown()`): its calls in flight are answered, new
        # ones refused, and the connection closes with the last of them.
        self.going_away = True

    # -- running calls -----------------------------------------------------------------------------------------

    async def _run(self, call: _Call, body: Callable[..., Awaitable[None]], *args: Any) -> None:
        """Run a call's body and end the call with the status it came to."""
        try:
            await body(call, *args)
        except AbortError as e:
            self._finish(call, e.code, e.message)
        except asyncio.CancelledError:
            self._cancelled(call)
        except Exception as e:  # protobuf DecodeError and handler bugs: the call fails, the server serves on
            self._failed(call, e)
        else:
            self._finish(call, grpc.StatusCode.OK, "")  # nothing to do if it was reset meanwhile

    async def _unary(self, call: _Call, message: bytes) -> None:
        method = call.method
        request = method.decode(message)
        # Only the answer stays referenced while it waits for the client's window (no request, no message).
        del message
        response = await method.handler(request, call.context)
        del request
        payload = method.encode(response)
        del response
        if call.id in self.calls:
            self._send_headers(call)
            await self._send(call, payload)

    async def _streaming(self, call: _Call) -> None:
        method = call.method
        async for response in method.handler(self._requests(call), call.context):
            if call.id not in self.calls:
                return
            if not call.headers_sent:
                self._send_headers(call)
            await self._send(call, method.encode(response))

    async def _requests(self, call: _Call) -> Any:
        """A streaming call's request messages, decoded, as its handler reads them."""
        inbox = call.inbox
        assert inbox is not None
        while True:
            while not inbox:
                if call.id not in self.calls:
                    return
                waiter = self.loop.create_future()
                self.inbox_waiters[call.id] = waiter
                try:
                    await waiter
                finally:
                    self.inbox_waiters.pop(call.id, None)
            message = inbox.popleft()
            if call.unacknowledged and len(inbox) < STREAM_INBOX // 2:
                self.http2.open_window(call.id, call.unacknowledged)
                call.unacknowledged = 0
                self._schedule_flush()
            if message is None:
                return
            try:
                request = call.method.decode(message)
            except Exception as e:
                raise AbortError(grpc.StatusCode.INTERNAL, f"failed to parse the request message: {e}") from e
            yield request

    def _cancelled(self, call: _Call) -> None:
        # A reset, a deadline or a lost connection has already ended the call; anything else is the server stopping.
        self._finish(call, grpc.StatusCode.UNAVAILABLE, "the server is stopping")

    def _failed(self, call: _Call, e: Exception) -> None:
        if isinstance(e, DecodeError):
            log.info("gRPC call to %s: failed to parse the request message: %s", call.method.name, e)
            self._finish(call, grpc.StatusCode.INTERNAL, f"failed to parse the request message: {e}")
            return
        log.exception("unhandled error in gRPC call to %s", call.method.name)
        self._finish(call, grpc.StatusCode.UNKNOWN, f"Unexpected error in {call.method.name}: {e}")

    def _deadline_expired(self, call: _Call) -> None:
        # Answered here, whether its handler runs or its request is still arriving; the handler is then cancelled.
        _log_cancellation(call, "its deadline expired")
        self._finish(call, grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        if call.task is not None:
            call.task.cancel()

    # -- sending -----------------------------------------------------------------------------------------------

    def _send_headers(self, call: _Call) -> None:
        call.headers_sent = True
        self._answered()
        try:  # noqa: SIM105 (try is cheaper than contextlib.suppress on the hot path)
            self.http2.send_headers(call.id, _RESPONSE_HEADERS)
        except StreamClosed:
            pass  # reset or connection gone; the call is dropped below
        self._schedule_flush()

    async def _send(self, call: _Call, payload: bytes) -> None:
        """One message as DATA (its 5-byte prefix, then the payload), as the peer's window and the transport allow.

        Each frame takes its slice of the payload: a large answer is not first copied whole behind its prefix.
        """
        self._answered()
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

    def _finish(self, call: _Call, code: grpc.StatusCode, message: str) -> None:
        """End a call with its status: trailers, or a trailers-only answer when nothing was sent yet."""
        if self.calls.get(call.id) is not call:
            return
        self._forget(call)
        if not call.headers_sent:
            self._answer_status(call.id, code, message, reset=not call.remote_ended)
            return
        try:
            trailers = _OK_TRAILERS if code is grpc.StatusCode.OK else status_trailers(code, message)
            self.http2.send_headers(call.id, trailers, end_stream=True)
            if not call.remote_ended:  # answered before the client finished sending: it may stop now
                self.http2.reset_stream(call.id, ErrorCode.NO_ERROR)
        except StreamClosed:
            pass
        self._schedule_flush()

    def _fail_early(self, call: _Call, e: AbortError) -> None:
        if call.task is not None:
            call.task.cancel()
        self._finish(call, e.code, e.message)

    def _answer_status(
        self, stream_id: int, code: grpc.StatusCode, message: str, *, reset: bool = False
    ) -> None:
        """A trailers-only answer: one HEADERS frame with the status, ending the stream."""
        self._answered()
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

    def _acknowledge_stream(self, call: _Call, size: int) -> None:
        """The same for a call's own window: only a call that receives more than half of it ever needs an update."""
        call.received += size
        if call.received >= INITIAL_WINDOW // 2:
            self.http2.open_window(call.id, call.received)
            call.received = 0

    def _forget(self, call: _Call) -> None:
        if self.calls.pop(call.id, None) is not None and call.deadline is not None:
            call.deadline.cancel()
        if not self.calls:
            self.idle.set()
            self.last_active = time.monotonic()  # idle from now
            if self.going_away:  # told to go, and nothing left to answer: the connection has served its time
                self._schedule_flush()
                self.loop.call_soon(self.close)

    def _wake_inbox(self, stream_id: int) -> None:
        waiter = self.inbox_waiters.get(stream_id)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake_window_waiters(self) -> None:
        waiters, self.window_waiters = self.window_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _schedule_flush(self) -> None:
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
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

    # -- shutdown ----------------------------------------------------------------------------------------------

    def go_away(self, code: ErrorCode = ErrorCode.NO_ERROR, debug: bytes = b"") -> None:
        """Send GOAWAY naming the last call we take, while the calls in flight may still be answered."""
        if self.going_away or self.transport is None or self.transport.is_closing():
            return
        self.going_away = True
        self.http2.send_goaway(code, debug)
        self._flush()

    async def drain(self, timeout: float) -> bool:
        """GOAWAY, then wait up to `timeout` s for the calls in flight; True when they all finished."""
        self.go_away()
        try:
            await asyncio.wait_for(self.idle.wait(), timeout)
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.http2.stopped = True  # the rest of what arrived is not parsed
        if self.transport is not None and not self.transport.is_closing():
            self._flush()
            self.transport.close()
