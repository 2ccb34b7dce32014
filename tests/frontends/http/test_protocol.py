"""The HTTP/1.1 server driven through a fake transport, as uvicorn tests its protocols: bytes in, bytes out, no
socket. Framing (Content-Length, chunked, pipelining, keep-alive), limits, malformed input, streamed answers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from modelhost.frontends.http.messages import HttpRequest, HttpResponse
from modelhost.frontends.http.protocol import HttpProtocol


class FakeTransport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self.paused = False

    def write(self, data: bytes) -> None:
        self.written += data

    def writelines(self, parts: list[bytes]) -> None:
        for part in parts:
            self.written += part

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


async def echo(request: HttpRequest) -> HttpResponse:
    """The request's method, path, query and body, back."""
    return HttpResponse(200, f"{request.method} {request.path}?{request.query} ".encode() + request.body)


def serve(*chunks: bytes, handler: Handler = echo, max_body: int = 1 << 20) -> tuple[bytes, FakeTransport]:
    """What the server writes for these bytes, read in these chunks, once it has answered all it can."""

    async def main() -> tuple[bytes, FakeTransport]:
        transport = FakeTransport()
        protocol = HttpProtocol(handler, max_body, set())
        protocol.connection_made(transport)  # type: ignore[arg-type]
        for chunk in chunks:
            protocol.data_received(chunk)
        for _ in range(20):  # let the worker answer everything pending
            await asyncio.sleep(0)
        return bytes(transport.written), transport

    return asyncio.run(main())


def test_a_request_with_a_body_is_answered() -> None:
    out, transport = serve(b"POST /v2/x?a=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello")
    assert out.startswith(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 20\r\n")
    assert out.endswith(b"\r\n\r\nPOST /v2/x?a=1 hello")
    assert not transport.closed  # keep-alive by default


def test_requests_split_anywhere_and_pipelined_are_answered_in_order() -> None:
    raw = b"GET /one HTTP/1.1\r\nHost: h\r\n\r\nPOST /two HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"
    out, _ = serve(*(raw[i : i + 7] for i in range(0, len(raw), 7)))
    assert out.count(b"HTTP/1.1 200 OK") == 2
    assert out.index(b"GET /one") < out.index(b"POST /two? abc")


def test_a_chunked_body_is_assembled() -> None:
    out, _ = serve(
        b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    )
    assert out.endswith(b"POST /c? abcde")


def test_chunked_with_a_content_length_is_read_chunked_and_the_connection_closed() -> None:
    raw = b"POST /c HTTP/1.1\r\nHost: h\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nz\r\n0\r\n\r\n"
    out, transport = serve(raw)
    assert out.endswith(b"POST /c? z") and b"Connection: close\r\n" in out
    assert transport.closed


def test_a_body_over_the_limit_is_flagged_and_the_connection_closed() -> None:
    seen: list[HttpRequest] = []

    async def handler(request: HttpRequest) -> HttpResponse:
        seen.append(request)
        return HttpResponse(400, b"{}")

    out, transport = serve(
        b"POST /big HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n0123456789", handler=handler, max_body=4
    )
    assert seen[0].too_large and seen[0].body == b""
    assert out.startswith(b"HTTP/1.1 400 Bad Request") and transport.closed


def test_malformed_input_is_a_400_and_a_closed_connection() -> None:
    out, transport = serve(b"NOT HTTP AT ALL\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400 Bad Request") and b"malformed HTTP request" in out
    assert transport.closed


def test_a_fault_in_a_handler_answers_500_and_the_connection_goes_on() -> None:
    async def handler(request: HttpRequest) -> HttpResponse:
        if request.path == "/bug":
            raise RuntimeError("a bug")
        return await echo(request)

    out, transport = serve(
        b"GET /bug HTTP/1.1\r\nHost: h\r\n\r\nGET /ok HTTP/1.1\r\nHost: h\r\n\r\n", handler=handler
    )
    assert (
        out.startswith(b"HTTP/1.1 500 Internal Server Error") and b'{"error":"internal server error"}' in out
    )
    assert b"GET /ok" in out and not transport.closed


def test_a_streamed_answer_goes_out_in_chunks() -> None:
    async def pieces() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        yield b"data: 2\n\n"

    async def handler(request: HttpRequest) -> HttpResponse:
        return HttpResponse(200, content_type="text/event-stream", stream=pieces())

    out, _ = serve(b"POST /s HTTP/1.1\r\nHost: h\r\n\r\n", handler=handler)
    assert b"Transfer-Encoding: chunked\r\n" in out
    assert out.endswith(b"9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n")


def test_http_1_0_closes_after_the_answer() -> None:
    out, transport = serve(b"GET /old HTTP/1.0\r\n\r\n")
    assert b"Connection: close\r\n" in out and transport.closed
