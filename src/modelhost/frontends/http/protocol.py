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
from typing import cast

import httptools

from modelhost.frontends.http.messages import Handler, HttpRequest, HttpResponse, error_response

log = logging.getLogger("modelhost.http")

_REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    415: "Unsupported Media Type",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    507: "Insufficient Storage",
}
_MAX_PIPELINED = 32


class HttpProtocol(asyncio.Protocol):
    def __init__(self, handler: Handler, max_body: int, connections: set[HttpProtocol]) -> None:
        self.handler = handler
        self.max_body = max_body
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
        self._reset()

    def _reset(self) -> None:
        self.url = b""
        self.headers: dict[str, str] = {}
        self.body_parts: list[bytes] = []
        self.body_size = 0
        self.too_large = False
        self.received_ns = 0
        self.conflicting_framing = False  # chunked and Content-Length: close after answering

    # -- asyncio.Protocol --------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        self.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        self.closing = True
        self.can_write.set()
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(400, "protocol upgrades are not supported")
        except httptools.HttpParserError as e:
            self._fail(400, f"malformed HTTP request: {e}")

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    # -- httptools callbacks -----------------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._reset()
        self.received_ns = time.monotonic_ns()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text

    def on_headers_complete(self) -> None:
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
        head = self._head(response, f"Content-Length: {len(response.body)}", keep_alive)
        self.transport.writelines([head, response.body])

    def _fail(self, status: int, message: str) -> None:
        log.info("closing a connection: %s", message)
        self._write(error_response(status, message), keep_alive=False)
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
    max_body: int,
    *,
    reuse_port: bool = False,
    connections: set[HttpProtocol] | None = None,
) -> tuple[asyncio.Server, set[HttpProtocol]]:
    """`reuse_port`: SO_REUSEPORT, for frontend processes that all listen on one port (the kernel spreads the
    connections over them). `connections`: the set open connections are kept in (one for several servers)."""
    loop = asyncio.get_running_loop()
    connections = set() if connections is None else connections

    def factory() -> HttpProtocol:
        return HttpProtocol(handler, max_body, connections)

    server = await loop.create_server(
        factory, host=host, port=port, reuse_address=True, reuse_port=reuse_port or None, backlog=2048
    )
    return server, connections
