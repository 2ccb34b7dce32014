"""Inference requests over HTTP: the body decoded (JSON, binary tensors, or a raw binary body described by the
model's signature), the answer encoded and compressed as asked; large ones off the event loop."""

from __future__ import annotations

import asyncio

from modelhost.engine_api import ModelSignature
from modelhost.errors import InternalError, InvalidArgument, ModelhostError
from modelhost.frontends.http.compression import choose_encoding, encode_body
from modelhost.frontends.http.infer_codec import (
    DecodedInfer,
    decode_json_request,
    decode_raw_request,
    encode_response,
)
from modelhost.frontends.http.messages import HttpRequest, HttpResponse
from modelhost.types import InferenceResponse

# Past these sizes a request is decoded, and its answer encoded, off the event loop.
LARGE_BODY = 1 << 20
LARGE_OUTPUT_ELEMENTS = 1 << 18


def compressed(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """The response compressed as the request's Accept-Encoding asks, where it has a body. As Triton, only the
    successful answers of /infer are compressed: metadata, config, statistics, generate answers and errors never
    are (clients such as tritonclient.http.aio do not decompress them)."""
    accept = request.headers.get("accept-encoding")
    if accept and response.body:
        encoding = choose_encoding(accept)
        if encoding:
            response.body = encode_body(response.body, encoding)
            response.headers.append(("Content-Encoding", encoding))
    return response


def is_raw_request(headers: dict[str, str]) -> bool:
    """A raw binary request (`Inference-Header-Content-Length: 0`): the model's signature describes its input."""
    header_length = headers.get("inference-header-content-length")
    return header_length is not None and header_length.strip().isdigit() and int(header_length) == 0


def decode_infer(
    headers: dict[str, str], body: bytes, name: str, version: str, signature: ModelSignature | None
) -> DecodedInfer:
    """An inference request's (decompressed) body: JSON, JSON header + binary tensors, or a raw binary request
    (one input, described by the model's `signature`, which the caller fetched when `is_raw_request`)."""
    header_length = headers.get("inference-header-content-length")
    if header_length is None:
        return decode_json_request(name, version, body, None)
    if not header_length.strip().isdigit() or int(header_length) > len(body):
        raise InvalidArgument(
            f"inference header size should be in range (0, {len(body)}), got: {header_length}"
        )
    length = int(header_length)
    if length == 0:
        assert signature is not None
        return decode_raw_request(signature, version, body)
    view = memoryview(body)
    return decode_json_request(name, version, view[:length], view[length:])


def encode_infer(name: str, response: InferenceResponse, decoded: DecodedInfer) -> HttpResponse:
    try:
        payload, json_length = encode_response(response, decoded.request, decoded.binary_all)
    except ModelhostError:
        raise
    except Exception as e:
        raise InternalError(f"failed to encode the response of model '{name}': {e}") from e
    if json_length is None:
        return HttpResponse(200, payload)
    return HttpResponse(
        200,
        payload,
        content_type="application/octet-stream",
        headers=[("Inference-Header-Content-Length", str(json_length))],
    )


async def encode_infer_off_loop_if_large(
    name: str, response: InferenceResponse, decoded: DecodedInfer
) -> HttpResponse:
    """`encode_infer`, on a worker thread when the outputs are large (the loop keeps serving meanwhile)."""
    if sum(t.data.size for t in response.outputs) > LARGE_OUTPUT_ELEMENTS:
        return await asyncio.to_thread(encode_infer, name, response, decoded)
    return encode_infer(name, response, decoded)
