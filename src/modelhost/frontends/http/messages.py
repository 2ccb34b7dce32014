"""HTTP requests and responses as the routes see them, and the answers every route gives alike (an error, an
empty 200, a JSON document, 405)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import orjson


@dataclass(slots=True)
class HttpRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    # Set when the body was larger than the limit: the handler answers with an error without reading it.
    too_large: bool = False
    received_ns: int = 0  # time.monotonic_ns() when the request began to arrive (HTTP_RECV_START of a trace)


@dataclass(slots=True)
class HttpResponse:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)
    # A body sent as it is produced, in chunks (server-sent events); `body` is then unused.
    stream: AsyncIterator[bytes] | None = None


def error_response(status: int, message: str) -> HttpResponse:
    return HttpResponse(status, orjson.dumps({"error": message}))


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


def ok() -> HttpResponse:
    return HttpResponse(200, b"")


def method_not_allowed() -> HttpResponse:
    return error_response(405, "Method Not Allowed")


def json_response(doc: object) -> HttpResponse:
    return HttpResponse(200, orjson.dumps(doc))
