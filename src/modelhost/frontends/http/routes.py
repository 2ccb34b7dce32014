"""Routing of KServe v2 and Triton extension endpoints to the core, with Triton's status codes and messages."""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import cast
from urllib.parse import unquote

import orjson

from modelhost.config import config_to_json
from modelhost.engine_api import CUDA_SHM, SYSTEM_SHM, CallContext, EngineAPI, ModelSignature, ShmKind
from modelhost.errors import (
    ErrorKind,
    InternalError,
    InvalidArgument,
    ModelhostError,
    request_failure_level,
)
from modelhost.frontends.http.compression import InflatedTooLarge, choose_encoding, decode_body, encode_body
from modelhost.frontends.http.generate import (
    ONE_RESPONSE,
    SSE_CONTENT_TYPE,
    decode_generate_request,
    encode_generate_response,
    is_flag_only,
    sse_error_event,
    sse_event,
)
from modelhost.frontends.http.infer_codec import (
    DecodedInfer,
    decode_json_request,
    decode_raw_request,
    encode_response,
)
from modelhost.frontends.http.protocol import HttpRequest, HttpResponse, error_response
from modelhost.frontends.http.statuses import http_status
from modelhost.host.cuda_runtime import IPC_HANDLE_SIZE
from modelhost.types import InferenceResponse, Parameters

log = logging.getLogger("modelhost.http")

# Triton's routing expressions (http_server.cc).
_HEALTH = re.compile(r"/v2(?:/health/(live|ready))?")
_MODEL = re.compile(
    r"/v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?"
)
_REPOSITORY = re.compile(r"/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))")
# Past these sizes a request is decoded, and its answer encoded, off the event loop.
LARGE_BODY = 1 << 20
LARGE_OUTPUT_ELEMENTS = 1 << 18
_SHARED_MEMORY = re.compile(r"/v2/(system|cuda)sharedmemory(?:/region/([^/]+))?/(status|register|unregister)")


def failure_response(method: str, path: str, e: ModelhostError) -> HttpResponse:
    """The answer to a request that failed with `e`, logged once: as an error when it is the server's fault."""
    log.log(request_failure_level(e), "%s %s failed: %s", method, path, e)
    response = error_response(http_status(e), str(e))
    if e.kind is ErrorKind.UNSUPPORTED_MEDIA_TYPE:
        response.headers.append(("Accept-Encoding", "gzip, deflate"))
    return response


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


def _ok() -> HttpResponse:
    return HttpResponse(200, b"")


def _method_not_allowed() -> HttpResponse:
    return error_response(405, "Method Not Allowed")


def _json(doc: object) -> HttpResponse:
    return HttpResponse(200, orjson.dumps(doc))


class HttpRoutes:
    def __init__(self, engine: EngineAPI, max_input_size: int) -> None:
        self.engine = engine
        self.max_input_size = max_input_size

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("HTTP request: %s %s", request.method, request.path)  # Triton's verbose line
        try:
            return await self._route(request)
        except ModelhostError as e:
            return failure_response(request.method, request.path, e)

    async def _route(self, request: HttpRequest) -> HttpResponse:
        if request.too_large:
            raise self._too_large(request)
        path = request.path
        if path.startswith("/v2/models/") and path != "/v2/models/stats" and (m := _MODEL.fullmatch(path)):
            return await self._model(request, unquote(m.group(1)), m.group(2) or "", m.group(3) or "")
        if path == "/v2/logging":
            return await self._logging(request)
        if path == "/v2/models/stats":
            if request.method != "GET":
                return _method_not_allowed()
            return await self._statistics("", "")
        if m := _HEALTH.fullmatch(path):
            if request.method != "GET":
                return _method_not_allowed()
            which = m.group(1)
            if which is None:
                return _json(await self.engine.server_metadata())
            ok = await (self.engine.is_live() if which == "live" else self.engine.is_ready())
            return _ok() if ok else HttpResponse(400, b"")
        if m := _REPOSITORY.fullmatch(path):
            action = m.group(4) or "index"
            return await self._repository(request, m.group(1), action, unquote(m.group(3) or ""))
        if m := _SHARED_MEMORY.fullmatch(path):
            kind = cast(ShmKind, m.group(1))
            return await self._shared_memory(request, kind, unquote(m.group(2) or ""), m.group(3))
        if path == "/v2/trace/setting":
            return await self._trace_settings(request)
        return error_response(404, "Not Found")

    def _too_large(self, request: HttpRequest, decompressed: bool = False) -> InvalidArgument:
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
            f"{what}{size} exceeds the maximum allowed value of {self.max_input_size} bytes{after}. "
            "Use --http-max-input-size to increase the limit."
        )

    async def _model(self, request: HttpRequest, name: str, version: str, action: str) -> HttpResponse:
        engine = self.engine
        if version and int(version) >= 2**63:
            # The route admits any digits; Triton parses them with std::stol.
            raise InvalidArgument(
                f"failed to get model version from specified version string '{version}' (details: stol), "
                "version should be an integral value > 0"
            )
        if action == "infer":
            if request.method != "POST":
                return _method_not_allowed()
            return await self.infer(request, name, version)
        if action in ("generate", "generate_stream"):
            return await self.generate(request, name, version, stream=action == "generate_stream")
        if request.method != "GET" and action not in ("trace/setting",):
            return _method_not_allowed()
        if action == "":
            return _json(await engine.model_metadata(name, version))
        if action == "ready":
            ready = await engine.model_ready(name, version)
            return _ok() if ready else error_response(400, "Model version not ready")
        if action == "config":
            return _json(config_to_json(await engine.model_config(name, version)))
        if action == "stats":
            return await self._statistics(name, version)
        if version:
            raise InvalidArgument("trace settings are per model, not per model version")
        return await self._trace_settings(request, name)

    async def _shared_memory(
        self, request: HttpRequest, kind: ShmKind, region: str, action: str
    ) -> HttpResponse:
        """The system_shared_memory and cuda_shared_memory extensions."""
        if request.method != ("GET" if action == "status" else "POST"):
            return _method_not_allowed()
        engine = self.engine
        if action == "status":
            return _json(await engine.shared_memory_status(kind, region))
        if action == "unregister":
            await engine.unregister_shared_memory(kind, region)
            return _ok()
        await engine.check_shared_memory(SYSTEM_SHM)  # the extension is on
        if not region:
            raise InvalidArgument(f"'region name' is necessary to register {kind} shared memory region")
        if kind == CUDA_SHM:
            await engine.check_shared_memory(kind)  # without a GPU: 501 with the reason, whatever the body
            handle, device_id, byte_size = _cuda_register_body(
                self._json_object(request, "shared memory register request")
            )
            await engine.register_cuda_shared_memory(region, handle, device_id, byte_size)
            return _ok()
        doc = self._json_object(request, "shared memory register request")
        key = doc.get("key")
        if key is None:
            raise InvalidArgument("Shared memory register request has no 'key' field")
        if not isinstance(key, str):
            raise InvalidArgument("Unable to parse 'key': attempt to access JSON non-string as string")
        if doc.get("byte_size") is None:
            raise InvalidArgument("Shared memory register request has no 'byte_size' field")
        await engine.register_system_shared_memory(
            region, key, _unsigned(doc, "offset", 0), _unsigned(doc, "byte_size")
        )
        return _ok()

    async def _trace_settings(self, request: HttpRequest, model: str = "") -> HttpResponse:
        """The trace extension: GET or POST /v2[/models/{m}]/trace/setting."""
        if request.method == "GET":
            return _json(await self.engine.trace_settings(model))
        if request.method != "POST":
            return _method_not_allowed()
        return _json(await self.engine.trace_settings(model, self._json_object(request, "trace settings")))

    async def _logging(self, request: HttpRequest) -> HttpResponse:
        if request.method == "GET":
            return _json(await self.engine.logging_settings())
        if request.method != "POST":
            return _method_not_allowed()
        return _json(await self.engine.logging_settings(self._json_object(request, "logging settings")))

    async def generate(
        self,
        request: HttpRequest,
        name: str,
        version: str,
        *,
        stream: bool,
        parameters: Parameters | None = None,
    ) -> HttpResponse:
        """The generate extension: one JSON answer (/generate), or server-sent events (/generate_stream). The
        status is that of the model's first answer; a later error in a stream is an error event."""
        if request.method != "POST":
            return _method_not_allowed()
        signature = await self.engine.model_signature(name, version)
        generate_request = decode_generate_request(
            self._body(request),
            name,
            version,
            signature.inputs,
            signature.max_batch_size,
            max_input_size=self.max_input_size,
        )
        if parameters:
            generate_request.parameters.update(parameters)
        if stream:
            # Refused: a JSON error; what the model then fails: events.
            await self.engine.check_request(generate_request)
        answers = _answers(self.engine.infer_stream(generate_request))
        if not stream:
            return await _one_answer(answers)
        try:
            first = await anext(answers)
        except StopAsyncIteration:
            return HttpResponse(200, content_type=SSE_CONTENT_TYPE, stream=_events(None, answers))
        # As Triton: the first answer sets the status; an error is an event like any later one, and the answers
        # that follow it still come.
        status = http_status(first) if isinstance(first, ModelhostError) else 200
        return HttpResponse(status, content_type=SSE_CONTENT_TYPE, stream=_events(first, answers))

    async def _statistics(self, name: str, version: str) -> HttpResponse:
        return _json({"model_stats": await self.engine.statistics(name, version)})

    async def _repository(
        self, request: HttpRequest, repo: str | None, action: str, name: str
    ) -> HttpResponse:
        if request.method != "POST":
            return _method_not_allowed()
        if repo is not None:
            return error_response(501, "'repository_name' specification is not supported")
        doc = self._json_object(request, "repository request")
        if action == "index":
            ready = doc.get("ready", False)
            if not isinstance(ready, bool):
                raise InvalidArgument("'ready' must be a boolean")
            return _json(await self.engine.repository_index(ready))
        parameters = doc.get("parameters", {})
        if not isinstance(parameters, dict):
            raise InvalidArgument("'parameters' must be a JSON object")
        if action == "load":
            await self.engine.load_model(name, parameters, files_base64=True)
        else:
            await self.engine.unload_model(name, parameters)
        return _ok()

    def _json_object(self, request: HttpRequest, what: str) -> dict[str, object]:
        """The request body as a JSON object; an empty body is an empty object."""
        body = self._body(request)
        if not body.strip():
            return {}
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise InvalidArgument(f"failed to parse the request JSON buffer: {e}") from e
        if not isinstance(doc, dict):
            raise InvalidArgument(f"the {what} must be a JSON object")
        return doc

    def _body(self, request: HttpRequest) -> bytes:
        encoding = request.headers.get("content-encoding")
        if encoding:
            try:
                return decode_body(request.body, encoding, self.max_input_size)
            except InflatedTooLarge as e:
                raise self._too_large(request, decompressed=True) from e
        return request.body

    def _decode(
        self, request: HttpRequest, name: str, version: str, signature: ModelSignature | None
    ) -> DecodedInfer:
        return decode_infer(request.headers, self._body(request), name, version, signature)

    @staticmethod
    async def _encoded(
        request: HttpRequest, name: str, response: InferenceResponse, decoded: DecodedInfer
    ) -> HttpResponse:
        return compressed(request, await encode_infer_off_loop_if_large(name, response, decoded))

    async def infer(
        self, request: HttpRequest, name: str, version: str, parameters: Parameters | None = None
    ) -> HttpResponse:
        """An inference request (/infer, and SageMaker's /invocations); `parameters` are added to the request's."""
        signature = (
            await self.engine.model_signature(name, version) if is_raw_request(request.headers) else None
        )
        # Large bodies are decoded and encoded on a worker thread: parsing 64 MiB of JSON or millions of BYTES
        # elements takes seconds, and the event loop must keep serving everyone else meanwhile.
        if len(request.body) > LARGE_BODY:
            decoded = await asyncio.to_thread(self._decode, request, name, version, signature)
        else:
            decoded = self._decode(request, name, version, signature)
        if parameters:
            decoded.request.parameters.update(parameters)
        core = decoded.request
        context = CallContext("HTTP", request.received_ns, request.headers.get("traceparent", ""))
        response = await self.engine.infer(core, context)  # a decoupled model: Triton's HTTP refusal
        if core.trace is None:
            return await self._encoded(request, name, response, decoded)
        send_started = time.monotonic_ns()
        try:
            return await self._encoded(request, name, response, decoded)
        finally:
            self.engine.sent(core, send_started)


async def _answers(
    responses: AsyncIterator[InferenceResponse],
) -> AsyncGenerator[InferenceResponse | ModelhostError, None]:
    """A generate request's answers: each response, or its error, without the empty final ones that only end a
    decoupled model's stream. An error that ends the request is the last item."""
    try:
        async for response in responses:
            if is_flag_only(response):
                continue
            if response.error is not None:
                error = response.error
                yield error if isinstance(error, ModelhostError) else InternalError(str(error))
            else:
                yield response
    except ModelhostError as e:
        yield e


async def _one_answer(answers: AsyncGenerator[InferenceResponse | ModelhostError, None]) -> HttpResponse:
    """/generate: the model's one answer. A model that answers several times, or not at all, is asked through the
    wrong endpoint: 400 (Triton sends its message with status 200)."""
    got = [answer async for answer in answers]
    if len(got) != 1:
        if got and isinstance(got[0], ModelhostError):
            raise got[0]
        raise InvalidArgument(ONE_RESPONSE)
    answer = got[0]
    if isinstance(answer, ModelhostError):
        raise answer
    return HttpResponse(200, encode_generate_response(answer))


async def _events(
    first: InferenceResponse | ModelhostError | None,
    answers: AsyncGenerator[InferenceResponse | ModelhostError, None],
) -> AsyncGenerator[bytes, None]:
    """/generate_stream's events: one per answer, an error as an error event (its status went out with the first
    answer: an error's own when the first answer was one)."""
    try:
        pending: list[InferenceResponse | ModelhostError] = [first] if first is not None else []
        while True:
            if pending:
                answer = pending.pop()
            else:
                try:
                    answer = await anext(answers)
                except StopAsyncIteration:
                    return
            if isinstance(answer, ModelhostError):
                log.info("generate_stream: %s", answer)
                yield sse_error_event(str(answer))
                continue
            try:
                yield sse_event(encode_generate_response(answer))
            except ModelhostError as e:
                yield sse_error_event(str(e))
    finally:
        await answers.aclose()  # the client went away: the request is cancelled


def _unsigned(doc: dict[str, object], field: str, default: int | None = None) -> int:
    """A uint64 member of a JSON request (absent: `default`, or Triton's error)."""
    value = doc.get(field, default)
    if value is None:
        raise InvalidArgument(
            f"Unable to parse '{field}': attempt to access non-existing object member '{field}'"
        )
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
        raise InvalidArgument(
            f"Unable to parse '{field}': attempt to access JSON non-unsigned-integer as unsigned-integer"
        )
    return value


def _cuda_register_body(doc: dict[str, object]) -> tuple[bytes, int, int]:
    """The raw IPC handle, device id and byte size of a CUDA register request:
    `{"raw_handle": {"b64": "<base64 of the 64 handle bytes>"}, "device_id": 0, "byte_size": N}`."""
    raw = doc.get("raw_handle")
    if raw is None:
        raise InvalidArgument("Shared memory register request has no 'raw_handle' field")
    if not isinstance(raw, dict):
        raise InvalidArgument(
            "Unable to parse 'raw_handle': attempt to access non-existing object member 'b64'"
        )
    b64 = raw.get("b64")
    if b64 is None:
        raise InvalidArgument(
            "Unable to parse 'raw_handle': attempt to access non-existing object member 'b64'"
        )
    if not isinstance(b64, str):
        raise InvalidArgument("Unable to parse 'b64': attempt to access JSON non-string as string")
    byte_size = _unsigned(doc, "byte_size")
    device_id = _unsigned(doc, "device_id")
    try:
        handle = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        handle = b""
    if len(handle) != IPC_HANDLE_SIZE:
        raise InvalidArgument("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
    return handle, device_id, byte_size
