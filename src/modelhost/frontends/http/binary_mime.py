"""The binary-tensor Content-Type of the cloud platforms' endpoints (SageMaker, Vertex AI): instead of the
Inference-Header-Content-Length header, the JSON header's size comes at the end of the media type
(`application/vnd.<platform>-triton.binary+json;json-header-size=N`). Parsed as Triton parses it, with its
messages."""

from __future__ import annotations

import dataclasses
import re

from modelhost.errors import InvalidArgument
from modelhost.frontends.http.messages import HttpRequest

_INT32_MAX = 2**31 - 1
HEADER_LENGTH = "inference-header-content-length"


def header_length(prefix: str, content_type: str, body_size: int) -> int | None:
    """The JSON header's size a binary Content-Type with `prefix` gives (None: the body is all JSON)."""
    at = content_type.find(prefix)
    if at < 0:
        return None
    if at > 0:
        raise InvalidArgument(f"expect MIME type for binary data starts with '{prefix}', got: {content_type}")
    text = content_type[len(prefix) :]
    digits = re.match(r"\s*[+-]?[0-9]+", text)
    if digits is None:
        raise InvalidArgument(f"Unable to parse inference header size, got: {text}")
    size = int(digits.group())
    if abs(size) > _INT32_MAX:
        raise InvalidArgument(f"Unable to parse inference header size, value is out of range, got: {text}")
    if not 0 <= size <= body_size:
        raise InvalidArgument(f"inference header size should be in range (0, {body_size}), got: {text}")
    return size


def as_kserve(request: HttpRequest, prefix: str) -> HttpRequest:
    """The request as the HTTP frontend's inference route reads it: the JSON header's size in its own header
    (Triton's platform servers ignore an Inference-Header-Content-Length a client sends)."""
    headers = {k: v for k, v in request.headers.items() if k != HEADER_LENGTH}
    size = header_length(prefix, request.headers.get("content-type", ""), len(request.body))
    if size is not None:
        headers[HEADER_LENGTH] = str(size)
    return dataclasses.replace(request, headers=headers)
