"""The HTTP/1.1 server driven through a fake transport, as uvicorn tests its protocols: bytes in, bytes out, no
socket. Framing (Content-Length, chunked, pipelining, keep-alive), limits, malformed input, streamed answers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from frontends.http.fake_transport import FakeTransport
from modelhost.frontends.http.messages import HttpRequest, HttpResponse
from modelhost.frontends.http.protocol import HttpProtocol
from modelhost.options.limits import HttpLimits

Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


async def echo(request: HttpRequest) -> HttpResponse:
    """The request's method, path, query and body, back."""
    return HttpResponse(200, f"{request.method} {request.path}?{request.query} ".encode() + request.body)


def serve(
    *chunks: bytes,
    handler: Handler = echo,
    max_body: int = 1 << 20,
    max_head: int = 1 << 16,
    half_close: bool = False,
) -> tuple[bytes, FakeTransport]:
    """What the server writes for these bytes, read in these chunks (then the client's half-close, if asked),
    once it has answered all it can."""

    async def main() -> tuple[bytes, FakeTransport]:
        transport = FakeTransport()
        protocol = HttpProtocol(handler, HttpLimits(max_body, max_head), set())
        protocol.connection_made(transport)  # type: ignore[arg-type]
        for chunk in chunks:
            protocol.data_received(chunk)
            if transport.closed:
                break
        if half_close and not transport.closed and not protocol.eof_received():
            transport.close()  # what asyncio does when eof_received() does not ask to keep the transport
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


# -- the request's head: limits, repeated fields, half-close ------------------------------------------------------


async def headers_of(request: HttpRequest) -> HttpResponse:
    return HttpResponse(200, repr(sorted(request.headers.items())).encode())


def test_a_header_field_sent_many_times_is_joined_once() -> None:
    head = b"GET /h HTTP/1.1\r\nHost: h\r\n" + b"".join(b"X-A: %d\r\n" % i for i in range(500)) + b"\r\n"
    out, transport = serve(head, handler=headers_of)
    assert out.startswith(b"HTTP/1.1 200 OK")
    assert ("'x-a', '" + ", ".join(str(i) for i in range(500)) + "'").encode() in out
    assert not transport.closed


def test_headers_past_the_limit_are_a_431_and_a_closed_connection() -> None:
    many = b"GET /h HTTP/1.1\r\n" + b"X-A: " + b"a" * 1000 + b"\r\n"
    # Whole: 10 copies of a 1 KB field against an 8 KiB limit.
    out, transport = serve(many[:18] + (many[18:]) * 10 + b"\r\n", max_head=8192)
    assert out.startswith(b"HTTP/1.1 431 Request Header Fields Too Large")
    assert b"larger than 8192 bytes (--http-max-header-size)" in out
    assert transport.closed
    # One endless field in small pieces: refused once the bytes received pass the limit, not at its end.
    pieces = [b"GET /h HTTP/1.1\r\nX-Big: "] + [b"b" * 1000] * 20
    out, transport = serve(*pieces, max_head=8192)
    assert out.startswith(b"HTTP/1.1 431 ")
    assert transport.closed


def test_too_many_header_fields_are_a_431() -> None:
    head = b"GET /h HTTP/1.1\r\n" + b"A: b\r\n" * 1001 + b"\r\n"
    out, transport = serve(head)
    assert out.startswith(b"HTTP/1.1 431 ")
    assert b"more than 1000 header fields" in out
    assert transport.closed


def test_a_url_past_the_limit_is_a_414() -> None:
    out, transport = serve(b"GET /" + b"u" * 5000 + b" HTTP/1.1\r\n\r\n", max_head=4096)
    assert out.startswith(b"HTTP/1.1 414 URI Too Long")
    assert b"longer than 4096 bytes" in out
    assert transport.closed


def test_large_bodies_and_pipelined_requests_are_not_taken_for_large_heads() -> None:
    body = b"x" * 50_000
    one = b"POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 50000\r\n\r\n" + body
    raw = one * 3
    out, transport = serve(*(raw[i : i + 6000] for i in range(0, len(raw), 6000)), max_head=2048)
    assert out.count(b"HTTP/1.1 200 OK") == 3
    assert not transport.closed


def test_a_request_followed_by_a_half_close_is_answered_then_closed() -> None:
    out, transport = serve(
        b"GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\n", half_close=True
    )
    assert out.count(b"HTTP/1.1 200 OK") == 2
    assert transport.closed
    # With nothing asked, a half-close closes at once.
    out, transport = serve(b"", half_close=True)
    assert out == b"" and transport.closed


# -- timeouts -------------------------------------------------------------------------------------------------------


def after(
    seconds: float, *chunks: bytes, handler: Handler = echo, **limits: float
) -> tuple[bytes, FakeTransport]:
    """What the server wrote for these chunks, `seconds` later (timeouts in `limits` are short for that)."""

    async def main() -> tuple[bytes, FakeTransport]:
        transport = FakeTransport()
        protocol = HttpProtocol(handler, HttpLimits(1 << 20, **limits), set())  # type: ignore[arg-type]
        protocol.connection_made(transport)  # type: ignore[arg-type]
        for chunk in chunks:
            protocol.data_received(chunk)
        await asyncio.sleep(seconds)
        return bytes(transport.written), transport

    return asyncio.run(main())


def test_a_connection_that_sends_nothing_is_closed_after_the_request_timeout() -> None:
    out, transport = after(0.3, request_timeout=0.05)
    assert out == b"" and transport.closed


def test_a_head_that_does_not_arrive_in_time_is_a_408() -> None:
    out, transport = after(0.3, b"GET /slow HTTP/1.1\r\nHost: h\r\nX-Trickle: a", request_timeout=0.05)
    assert out.startswith(b"HTTP/1.1 408 Request Timeout")
    assert b"did not arrive in 0.05 s" in out
    assert transport.closed


def test_a_body_that_stops_coming_is_a_408() -> None:
    out, transport = after(
        0.3, b"POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 1000000000\r\n\r\nsmall", request_timeout=0.05
    )
    assert out.startswith(b"HTTP/1.1 408 ")
    assert b"no byte of the request's body for 0.05 s" in out
    assert transport.closed


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() -> None:
    out, transport = after(0.3, b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n", idle_timeout=0.05, request_timeout=60)
    assert (
        out.startswith(b"HTTP/1.1 200 OK") and out.count(b"HTTP/1.1") == 1
    )  # answered; closed without a word
    assert transport.closed


def test_no_timeout_runs_while_a_request_is_answered() -> None:
    async def slow(request: HttpRequest) -> HttpResponse:
        await asyncio.sleep(0.3)  # six request timeouts
        return HttpResponse(200, b"done")

    out, transport = after(
        0.6, b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n", handler=slow, request_timeout=0.05, idle_timeout=60
    )
    assert out.startswith(b"HTTP/1.1 200 OK") and out.endswith(b"done")
    assert not transport.closed


def test_a_connection_past_the_limit_is_answered_503_and_closed() -> None:
    async def main() -> tuple[bytes, FakeTransport, FakeTransport]:
        connections: set[HttpProtocol] = set()
        limits = HttpLimits(1 << 20, max_connections=1)
        first, second = FakeTransport(), FakeTransport()
        HttpProtocol(echo, limits, connections).connection_made(first)  # type: ignore[arg-type]
        HttpProtocol(echo, limits, connections).connection_made(second)  # type: ignore[arg-type]
        return bytes(second.written), first, second

    out, first, second = asyncio.run(main())
    assert out.startswith(b"HTTP/1.1 503 ") and b"--http-max-connections" in out
    assert second.closed and not first.closed
