"""HTTP/1.1 on a hand-written asyncio.Protocol over httptools.

Chosen by measurement (benchmarks/README.md): at these request rates every hop shows, and a bare protocol
leaves twice the headroom of an ASGI server. Each connection handles its requests in order (pipelined requests
queue behind the one in flight); reading pauses while too many wait, and writing honours transport back-pressure.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from ssl import SSLContext
from typing import cast

import httptools

from modelhost.frontends.http.messages import Handler, HttpRequest, HttpResponse, error_response
from modelhost.observability.logs import RateLimitedLog
from modelhost.options.limits import HttpLimits

log = logging.getLogger("modelhost.http")

_REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    414: "URI Too Long",
    415: "Unsupported Media Type",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    507: "Insufficient Storage",
}
_MAX_PIPELINED = 32
# The most header fields one request may have (their bytes are bounded by `max_head` as well).
MAX_HEADER_COUNT = 1000
# Seconds a connection refused mid-request still reads (and drops) what its client sends, after the answer.
_LINGER_S = 1.0


_refusals = RateLimitedLog()


class _HeadTooLarge(Exception):
    """Raised in a parser callback: the request line or headers pass their limits (answered, then closed)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class HttpProtocol(asyncio.Protocol):
    def __init__(self, handler: Handler, limits: HttpLimits, connections: set[HttpProtocol]) -> None:
        self.handler = handler
        self.limits = limits
        self.max_body = limits.max_body
        self.max_head = limits.max_head
        self.connections = connections
        self.parser = httptools.HttpRequestParser(self)
        # A request with both Transfer-Encoding: chunked and Content-Length is read with the chunked framing, as
        # RFC 9112 (6.3) says and Triton does (the `requests` library sends such requests); llhttp refuses it
        # unless asked. Its connection is closed after the answer, so that nothing can be smuggled behind it.
        self.parser.set_dangerous_leniencies(lenient_chunked_length=True)
        self.transport: asyncio.Transport | None = None
        self.pending: collections.deque[tuple[HttpRequest, bool]] = collections.deque()
        self.worker: asyncio.Task[None] | None = None
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.reading_paused = False
        self.closing = False
        # The client half-closed after its requests: they are answered, then the connection is closed.
        self.peer_finished = False
        # Reading a request's head (its line and headers), and the bytes received while doing so.
        self.in_head = True
        self.head_bytes = 0
        self.completed = 0  # requests read whole on this connection
        # The timeouts: one timer per connection, moved on lazily (when it fires, it checks the times below and
        # sets itself again if its deadline moved), so that receiving bytes only reads the clock.
        self.timer: asyncio.TimerHandle | None = None
        self.last_active = time.monotonic()  # the last byte received or answer sent
        self.head_started: float | None = None  # when the request whose head is arriving began
        self._reset()

    def _reset(self) -> None:
        self.url = b""
        self.headers: dict[str, str] = {}
        # Values of a header field sent more than once, joined with ", " when the headers end (joining them as
        # they come is quadratic in the count: 10,000 copies of one header once stalled the server for 15 s).
        self.repeated: dict[str, list[str]] = {}
        self.header_count = 0
        self.header_bytes = 0
        self.body_parts: list[bytes] = []
        self.body_size = 0
        self.too_large = False
        self.received_ns = 0
        self.conflicting_framing = False  # chunked and Content-Length: close after answering

    # -- asyncio.Protocol --------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        if len(self.connections) >= self.limits.max_connections:
            _refusals.note(
                log, f"{self.limits.max_connections} HTTP connections are open (--http-max-connections)"
            )
            self._write(
                error_response(503, "too many connections; try again later (--http-max-connections)"),
                keep_alive=False,
            )
            self._close()
            return
        self.connections.add(self)
        self.head_started = self.last_active  # a connection opened and left silent is a request not sent
        self._arm(min(self.limits.idle_timeout, self.limits.request_timeout))

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        self.closing = True
        self.can_write.set()
        self.pending.clear()
        if self.timer is not None:
            self.timer.cancel()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return  # refused and lingering (_fail): what still comes is dropped
        self.last_active = time.monotonic()
        completed = self.completed
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(400, "protocol upgrades are not supported")
            return
        except httptools.HttpParserCallbackError as e:
            if isinstance(e.__context__, _HeadTooLarge):
                self._fail(e.__context__.status, e.__context__.message)
                return
            self._fail(400, f"malformed HTTP request: {e}")
            return
        except httptools.HttpParserError as e:
            self._fail(400, f"malformed HTTP request: {e}")
            return
        # httptools holds a header field whole until it ends, unseen: so the head's bytes are counted as they
        # arrive. A chunk in which a request ended and the next one's head began starts the count afresh.
        if self.in_head:
            self.head_bytes = 0 if self.completed != completed else self.head_bytes + len(data)
            if self.head_bytes > self.max_head:
                self._fail(431, self._head_message())

    # -- timeouts ----------------------------------------------------------------------------------------------

    def _arm(self, delay: float) -> None:
        self.timer = asyncio.get_running_loop().call_later(max(delay, 0.001), self._on_timer)

    def _on_timer(self) -> None:
        self.timer = None
        if self.closing:
            return
        now = time.monotonic()
        limits = self.limits
        if self.pending or (self.worker is not None and not self.worker.done()):
            self._arm(min(limits.idle_timeout, limits.request_timeout))  # answering: no timeout runs
        elif not self.in_head:  # inside a body: it must keep coming
            left = self.last_active + limits.request_timeout - now
            if left > 0:
                self._arm(left)
            else:
                self._fail(408, f"no byte of the request's body for {limits.request_timeout:g} s")
        elif self.head_started is not None:  # a head is arriving: it must be whole in time
            left = self.head_started + limits.request_timeout - now
            if left > 0:
                self._arm(left)
            elif self.completed == 0 and self.head_bytes == 0 and not self.url:
                log.info("closing a connection that sent no request in %g s", limits.request_timeout)
                self._close()
            else:
                self._fail(
                    408, f"the request's line and headers did not arrive in {limits.request_timeout:g} s"
                )
        else:  # idle between requests
            left = self.last_active + limits.idle_timeout - now
            if left > 0:
                self._arm(left)
            else:
                self._close()

    def eof_received(self) -> bool | None:
        """A client that half-closes after sending its requests still gets their answers."""
        self.peer_finished = True
        if self.pending or (self.worker is not None and not self.worker.done()):
            return True  # keep the transport open for writing; closed once the requests are answered
        return None

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    # -- httptools callbacks -----------------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._reset()
        self.received_ns = time.monotonic_ns()
        if self.completed:  # the first request's head counts from the connection's opening
            self.head_started = self.received_ns / 1e9

    def on_url(self, url: bytes) -> None:
        self.url += url
        if len(self.url) > self.max_head:
            raise _HeadTooLarge(
                414, f"the request's URL is longer than {self.max_head} bytes (--http-max-header-size)"
            )

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_count += 1
        self.header_bytes += len(name) + len(value) + 4
        if self.header_count > MAX_HEADER_COUNT:
            raise _HeadTooLarge(431, f"the request has more than {MAX_HEADER_COUNT} header fields")
        if len(self.url) + self.header_bytes > self.max_head:
            raise _HeadTooLarge(431, self._head_message())
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        if key in self.headers:
            self.repeated.setdefault(key, [self.headers[key]]).append(text)
        else:
            self.headers[key] = text

    def _head_message(self) -> str:
        return (
            f"the request's line and header fields are larger than {self.max_head} bytes "
            "(--http-max-header-size)"
        )

    def on_headers_complete(self) -> None:
        self.in_head = False
        self.head_started = None
        for key, values in self.repeated.items():
            self.headers[key] = ", ".join(values)
        if (
            "chunked" in self.headers.get("transfer-encoding", "").lower()
            and "content-length" in self.headers
        ):
            del self.headers["content-length"]  # chunked wins; the length is not passed on (RFC 9112 6.3)
            self.conflicting_framing = True
        length = self.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            self.too_large = True
        if self.headers.get("expect", "").lower() == "100-continue" and not self.too_large and self.transport:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self.too_large:
            return
        self.body_size += len(body)
        if self.body_size > self.max_body:
            self.too_large = True
            self.body_parts.clear()
            return
        self.body_parts.append(body)

    def on_message_complete(self) -> None:
        self.in_head = True
        self.completed += 1
        path, _, query = self.url.decode("latin-1").partition("?")
        method = self.parser.get_method().decode("ascii", "replace")
        body = self.body_parts[0] if len(self.body_parts) == 1 else b"".join(self.body_parts)
        request = HttpRequest(method, path, query, self.headers, body, self.too_large, self.received_ns)
        keep_alive = self.parser.should_keep_alive() and not self.too_large and not self.conflicting_framing
        self.pending.append((request, keep_alive))
        if len(self.pending) >= _MAX_PIPELINED and self.transport and not self.reading_paused:
            self.transport.pause_reading()
            self.reading_paused = True
        if self.worker is None or self.worker.done():
            self.worker = asyncio.get_running_loop().create_task(self._serve_pending())

    # -- serving -----------------------------------------------------------------------------------------------

    async def _serve_pending(self) -> None:
        while self.pending and not self.closing:
            request, keep_alive = self.pending.popleft()
            try:
                response = await self.handler(request)
            except Exception:  # a bug in a handler must not take the connection's other requests down
                log.exception("unhandled error serving %s %s", request.method, request.path)
                response = error_response(500, "internal server error")
            if not self.can_write.is_set():
                await self.can_write.wait()
            if response.stream is not None:
                await self._write_stream(response, keep_alive)
            else:
                self._write(response, keep_alive)
            if not keep_alive:
                self._close()
                return
            if self.reading_paused and len(self.pending) < _MAX_PIPELINED // 2 and self.transport:
                self.transport.resume_reading()
                self.reading_paused = False
        if self.peer_finished and not self.pending:
            self._close()

    async def _write_stream(self, response: HttpResponse, keep_alive: bool) -> None:
        """A chunked response: each piece the stream yields is sent at once (honouring back-pressure). A client
        that goes away ends the stream, which cancels what produces it."""
        stream = response.stream
        assert stream is not None
        try:
            if self.transport is None or self.closing:
                return
            self.transport.write(self._head(response, "Transfer-Encoding: chunked", keep_alive))
            async for piece in stream:
                if self.closing or self.transport is None:
                    return
                if piece:
                    self.transport.writelines([f"{len(piece):x}\r\n".encode(), piece, b"\r\n"])
                if not self.can_write.is_set():
                    await self.can_write.wait()
            if not self.closing and self.transport is not None:
                self.transport.write(b"0\r\n\r\n")
        except Exception:  # a bug in what produces the stream: the status is sent, so only closing tells
            log.exception("unhandled error streaming the answer")
            self._close()
        finally:
            self.last_active = time.monotonic()  # a long stream is activity: the idle time starts after it
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

    def _head(self, response: HttpResponse, length: str, keep_alive: bool) -> bytes:
        reason = _REASONS.get(response.status, "")
        head = [
            f"HTTP/1.1 {response.status} {reason}\r\nContent-Type: {response.content_type}\r\n{length}\r\n"
        ]
        for name, value in response.headers:
            head.append(f"{name}: {value}\r\n")
        if not keep_alive:
            head.append("Connection: close\r\n")
        head.append("\r\n")
        return "".join(head).encode("latin-1")

    def _write(self, response: HttpResponse, keep_alive: bool) -> None:
        if self.transport is None or self.closing:
            return
        self.last_active = time.monotonic()
        head = self._head(response, f"Content-Length: {len(response.body)}", keep_alive)
        self.transport.writelines([head, response.body])

    def _fail(self, status: int, message: str) -> None:
        """Answer a request that cannot be read on, then end the connection. Its client may still be sending
        (a header of 100 MB): closing at once with its bytes unread would make the kernel reset the connection,
        and a reset can reach the client before it has read the answer. So the answer is followed by our end of
        the stream, and what the client still sends is read and dropped for a moment before the close."""
        log.info("closing a connection: %s", message)
        self._write(error_response(status, message), keep_alive=False)
        self.closing = True
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if transport.can_write_eof():
            transport.write_eof()
            asyncio.get_running_loop().call_later(_LINGER_S, self._close)
        else:
            self._close()

    def _close(self) -> None:
        self.closing = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def close_if_idle(self) -> None:
        """Used at shutdown: close a keep-alive connection that has nothing in flight."""
        if not self.pending and (self.worker is None or self.worker.done()):
            self._close()


async def start_http_server(
    handler: Handler,
    host: str,
    port: int,
    limits: HttpLimits,
    *,
    reuse_port: bool = False,
    connections: set[HttpProtocol] | None = None,
    ssl: SSLContext | None = None,
    start_serving: bool = True,
) -> tuple[asyncio.Server, set[HttpProtocol]]:
    """`reuse_port`: SO_REUSEPORT, for frontend processes that all listen on one port (the kernel spreads the
    connections over them). `connections`: the set open connections are kept in (one for several servers).
    `ssl`: serve HTTPS with this context. `start_serving`: False binds and listens but accepts nothing until
    `server.start_serving()`."""
    loop = asyncio.get_running_loop()
    connections = set() if connections is None else connections

    def factory() -> HttpProtocol:
        return HttpProtocol(handler, limits, connections)

    server = await loop.create_server(
        factory,
        host=host,
        port=port,
        reuse_address=True,
        reuse_port=reuse_port or None,
        backlog=2048,
        ssl=ssl,
        start_serving=start_serving,
    )
    return server, connections
