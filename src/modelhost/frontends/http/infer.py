"""The inference endpoint over HTTP (`/infer`, and SageMaker's and Vertex AI's invocations): the body inflated and
decoded (JSON, binary tensors, or a raw binary body described by the model's signature), the engine's answer
encoded and compressed as asked; large ones off the event loop. All of it here, in one place."""

from __future__ import annotations

import asyncio
import re

from modelhost.engine_api import CallContext, EngineAPI, ModelSignature
from modelhost.errors import InternalError, InvalidArgument, ModelhostError
from modelhost.frontends.header_forwarding import forwarded_parameters
from modelhost.frontends.http.bodies import request_body
from modelhost.frontends.http.compression import choose_encoding, encode_body
from modelhost.frontends.http.infer_codec import (
    DecodedInfer,
    decode_json_request,
    decode_raw_request,
    encode_response,
)
from modelhost.frontends.http.messages import HttpRequest, HttpResponse
from modelhost.frontends.tracing import sending
from modelhost.types import InferenceResponse, Parameters

# Past these sizes a request is decoded, and its answer encoded, off the event loop.
LARGE_BODY = 1 << 20
LARGE_OUTPUT_ELEMENTS = 1 << 18


class InferEndpoint:
    """POST /v2/models/{model}[/versions/{version}]/infer."""

    __slots__ = ("engine", "header_forward", "max_input_size")

    def __init__(self, engine: EngineAPI, max_input_size: int, header_forward: re.Pattern[str] | None) -> None:
        """`header_forward`: --http-header-forward-pattern, compiled (None: no header is forwarded)."""
        self.engine = engine
        self.max_input_size = max_input_size
        self.header_forward = header_forward

    async def __call__(
        self, request: HttpRequest, name: str, version: str, parameters: Parameters | None = None
    ) -> HttpResponse:
        """Answer an inference request to model `name` (`version`: "" for the policy's choice); `parameters` are
        added to the request's (SageMaker's custom attributes)."""
        engine = self.engine
        headers = request.headers
        signature = await engine.model_signature(name, version) if is_raw_request(headers) else None
        # Large bodies are inflated, decoded and encoded on a worker thread: parsing 64 MiB of JSON or millions of
        # BYTES elements takes seconds, and the event loop must keep serving everyone else meanwhile.
        if len(request.body) > LARGE_BODY:
            decoded = await asyncio.to_thread(
                decode_infer, request, self.max_input_size, name, version, signature
            )
        else:
            decoded = decode_infer(request, self.max_input_size, name, version, signature)
        core = decoded.request
        if parameters:
            core.parameters.update(parameters)
        if self.header_forward is not None:
            core.parameters.update(forwarded_parameters(self.header_forward, headers.items()))
        context = CallContext("HTTP", request.received_ns, headers.get("traceparent", ""))
        response = await engine.infer(core, context)  # a decoupled model: Triton's HTTP refusal
        if core.trace is None:
            return await answer(request, name, response, decoded)
        with sending(engine, core):  # the trace records the answer's encoding
            return await answer(request, name, response, decoded)


def is_raw_request(headers: dict[str, str]) -> bool:
    """A raw binary request (`Inference-Header-Content-Length: 0`): the model's signature describes its input."""
    header_length = headers.get("inference-header-content-length")
    return header_length is not None and header_length.strip().isdigit() and int(header_length) == 0


def decode_infer(
    request: HttpRequest, max_input_size: int, name: str, version: str, signature: ModelSignature | None
) -> DecodedInfer:
    """An inference request's body, inflated: JSON, JSON header + binary tensors, or a raw binary request (one
    input, described by the model's `signature`, which the caller fetched when `is_raw_request`)."""
    body = request_body(request, max_input_size)
    header_length = request.headers.get("inference-header-content-length")
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


async def answer(
    request: HttpRequest, name: str, response: InferenceResponse, decoded: DecodedInfer
) -> HttpResponse:
    """The engine's answer encoded (on a worker thread when its outputs are large: the loop keeps serving
    meanwhile) and compressed as the request asks."""
    if sum(t.data.size for t in response.outputs) > LARGE_OUTPUT_ELEMENTS:
        encoded = await asyncio.to_thread(encode_infer, name, response, decoded)
    else:
        encoded = encode_infer(name, response, decoded)
    return compressed(request, encoded)


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
