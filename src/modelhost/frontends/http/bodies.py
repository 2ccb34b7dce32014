"""A request's body as the endpoints read it: inflated as its Content-Encoding says, never past
--http-max-input-size (with Triton's message), and, for the extensions, as a JSON object."""

from __future__ import annotations

import orjson

from modelhost.errors import InvalidArgument
from modelhost.frontends.http.compression import InflatedTooLarge, decode_body
from modelhost.frontends.http.messages import HttpRequest


def body_too_large(request: HttpRequest, max_input_size: int, decompressed: bool = False) -> InvalidArgument:
    """The error of a body over the limit (as received, or once inflated)."""
    # Triton's wording and status (400, not 413): its tests match "exceeds the maximum allowed value" and,
    # for JSON bodies, "Request JSON size" and "Use --http-max-input-size to increase the limit".
    what = (
        "Request JSON size"
        if "inference-header-content-length" not in request.headers
        else "Request size"
    )
    length = request.headers.get("content-length", "")
    size = f" of {length} bytes" if length.isdigit() and not decompressed else ""
    after = " after decompression" if decompressed else ""
    return InvalidArgument(
        f"{what}{size} exceeds the maximum allowed value of {max_input_size} bytes{after}. "
        "Use --http-max-input-size to increase the limit."
    )


def request_body(request: HttpRequest, max_input_size: int) -> bytes:
    """The body, inflated when it came compressed."""
    encoding = request.headers.get("content-encoding")
    if encoding:
        try:
            return decode_body(request.body, encoding, max_input_size)
        except InflatedTooLarge as e:
            raise body_too_large(request, max_input_size, decompressed=True) from e
    return request.body


def json_object(request: HttpRequest, max_input_size: int, what: str) -> dict[str, object]:
    """The body as a JSON object, `what` naming it in the error when it is not one; an empty body is an empty
    object."""
    body = request_body(request, max_input_size)
    if not body.strip():
        return {}
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise InvalidArgument(f"failed to parse the request JSON buffer: {e}") from e
    if not isinstance(doc, dict):
        raise InvalidArgument(f"the {what} must be a JSON object")
    return doc
