"""A gRPC connection's calls: each HTTP/2 stream the client opens is one call, checked from its headers, fed its
request as DATA arrives, run as one task on the server's event loop, and ended with the status it came to.

A unary call starts its handler once the request's single message and END_STREAM have arrived; a streaming call
starts at once and reads its messages from an inbox. Memory stays bounded on the receiving side: at most
MAX_CONCURRENT_STREAMS calls per connection, each message at most `max_message_size`, and a streaming call's
unread messages held back by not acknowledging their bytes (the client's window closes). `answers.py` writes.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

from modelhost.frontends.grpc.answers import AnswerWriter, Call
from modelhost.frontends.grpc.calls import (
    AbortError,
    CallContext,
    MessageReader,
    parse_timeout,
    status_trailers,
)
from modelhost.frontends.grpc.http2 import Http2Server
from modelhost.frontends.grpc.http2_frames import ErrorCode, StreamClosed
from modelhost.frontends.grpc.keepalive import Keepalive
from modelhost.frontends.grpc.methods import Method

log = logging.getLogger("modelhost.grpc")

# What the client may send, announced in our SETTINGS (`connection.py`).
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

_OK_TRAILERS = [(b"grpc-status", b"0")]


def _log_cancellation(call: Call, why: str) -> None:
    if log.isEnabledFor(logging.DEBUG):  # Triton's verbose line, which its qa suites look for
        log.debug(
            "Cancellation notification received for %sHandler, stream %d: %s", call.method.name, call.id, why
        )


class CallDispatch(AnswerWriter):
    """The HTTP/2 events of a connection's streams, as calls of its methods."""

    __slots__ = (
        "any_call",
        "idle",
        "inbox_waiters",
        "last_active",
        "max_decompressed_size",
        "max_message_size",
        "methods",
        "resets",
    )

    def __init__(
        self,
        http2: Http2Server,
        keepalive: Keepalive,
        loop: asyncio.AbstractEventLoop,
        methods: dict[bytes, Method],
        max_message_size: int,
        max_decompressed_size: int,
    ) -> None:
        super().__init__(http2, keepalive, loop)
        self.methods = methods
        self.max_message_size = max_message_size
        self.max_decompressed_size = max_decompressed_size
        self.inbox_waiters: dict[int, asyncio.Future[None]] = {}
        self.resets: collections.deque[float] = collections.deque()
        self.idle = asyncio.Event()  # no call in flight
        self.idle.set()
        # The last call started, request bytes received, or call ended: frames without a call (SETTINGS, PRIORITY,
        # an unknown type) do not keep a connection open past its idle and request timeouts.
        self.last_active = time.monotonic()
        self.any_call = False  # a call was started on this connection

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
            reader = MessageReader(encoding, self.max_message_size, self.max_decompressed_size)
            seconds = parse_timeout(timeout) if timeout is not None else None
        except AbortError as e:
            log.info("refused a gRPC call to %s: %s", path.decode("latin-1"), e.message)
            self._answer_status(stream_id, e.code, e.message, reset=not end_stream)
            return
        call = Call(stream_id, method, reader, CallContext(headers))
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

    def on_goaway(self, code: int) -> None:
        if code != ErrorCode.NO_ERROR or not self.calls:
            self.close()  # an error: the client reads no more, so what is in flight cannot be answered
            return
        # A client shutting down gracefully (grpc-java's `shutdown()`): its calls in flight are answered, new
        # ones refused, and the connection closes with the last of them.
        self.going_away = True

    # -- running calls -----------------------------------------------------------------------------------------

    async def _run(self, call: Call, body: Callable[..., Awaitable[None]], *args: Any) -> None:
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

    async def _unary(self, call: Call, message: bytes) -> None:
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

    async def _streaming(self, call: Call) -> None:
        method = call.method
        async for response in method.handler(self._requests(call), call.context):
            if call.id not in self.calls:
                return
            if not call.headers_sent:
                self._send_headers(call)
            await self._send(call, method.encode(response))

    async def _requests(self, call: Call) -> Any:
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

    def _cancelled(self, call: Call) -> None:
        # A reset, a deadline or a lost connection has already ended the call; anything else is the server stopping.
        self._finish(call, grpc.StatusCode.UNAVAILABLE, "the server is stopping")

    def _failed(self, call: Call, e: Exception) -> None:
        if isinstance(e, DecodeError):
            log.info("gRPC call to %s: failed to parse the request message: %s", call.method.name, e)
            self._finish(call, grpc.StatusCode.INTERNAL, f"failed to parse the request message: {e}")
            return
        log.exception("unhandled error in gRPC call to %s", call.method.name)
        self._finish(call, grpc.StatusCode.UNKNOWN, f"Unexpected error in {call.method.name}: {e}")

    def _deadline_expired(self, call: Call) -> None:
        # Answered here, whether its handler runs or its request is still arriving; the handler is then cancelled.
        _log_cancellation(call, "its deadline expired")
        self._finish(call, grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        if call.task is not None:
            call.task.cancel()

    # -- ending calls ------------------------------------------------------------------------------------------

    def _finish(self, call: Call, code: grpc.StatusCode, message: str) -> None:
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

    def _fail_early(self, call: Call, e: AbortError) -> None:
        if call.task is not None:
            call.task.cancel()
        self._finish(call, e.code, e.message)

    def _acknowledge_stream(self, call: Call, size: int) -> None:
        """A call's own window reopened once half of it is used, as `http2.py` reopens the connection's: only a
        call that receives more than half of it ever needs an update."""
        call.received += size
        if call.received >= INITIAL_WINDOW // 2:
            self.http2.open_window(call.id, call.received)
            call.received = 0

    def _forget(self, call: Call) -> None:
        if self.calls.pop(call.id, None) is not None and call.deadline is not None:
            call.deadline.cancel()
        if not self.calls:
            self.idle.set()
            self.last_active = time.monotonic()  # idle from now
            if self.going_away:  # told to go, and nothing left to answer: the connection has served its time
                self._schedule_flush()
                self.loop.call_soon(self.close)

    def _drop_calls(self, why: str) -> None:
        """Every call ended without an answer (the connection is gone): forgotten, its handler cancelled."""
        for call in list(self.calls.values()):
            _log_cancellation(call, why)
            self._forget(call)
            if call.task is not None:
                call.task.cancel()

    def _wake_inbox(self, stream_id: int) -> None:
        waiter = self.inbox_waiters.get(stream_id)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
