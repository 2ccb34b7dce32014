"""The HTTP load generator's reading of responses."""

from __future__ import annotations

from modelhost.perf.http_load import _response_end


def test_response_end() -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Type: x\r\nContent-Length: 5\r\n\r\nhello"
    assert _response_end(ok) == len(ok)
    assert _response_end(ok[:-1]) == -1
    assert _response_end(ok[:20]) == -1
    assert _response_end(ok + b"HTTP/1.1") == len(ok)
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    assert _response_end(chunked) == len(chunked)
    assert _response_end(chunked[:-2]) == -1
    assert _response_end(b"HTTP/1.1 204 No Content\r\n\r\n") == 27
