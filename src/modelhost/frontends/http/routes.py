"""Routing of KServe v2 and Triton extension endpoints to the engine, with Triton's status codes and messages.

Inference bodies are decoded and encoded in infer.py, the generate extension answered in generate.py."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from typing import cast
from urllib.parse import unquote

import orjson

from modelhost.config import config_to_json
from modelhost.engine_api import CallContext, EngineAPI, ModelSignature, ShmKind
from modelhost.errors import InvalidArgument, ModelhostError
from modelhost.frontends.console.routes import ConsoleRoutes, is_console_path
from modelhost.frontends.console.settings import ConsoleSettings
from modelhost.frontends.header_forwarding import forwarded_parameters
from modelhost.frontends.http.compression import InflatedTooLarge, decode_body
from modelhost.frontends.http.extensions import logging_settings, repository, shared_memory, trace_settings
from modelhost.frontends.http.generate import generate
from modelhost.frontends.http.infer import (
    LARGE_BODY,
    compressed,
    decode_infer,
    encode_infer_off_loop_if_large,
    is_raw_request,
)
from modelhost.frontends.http.infer_codec import DecodedInfer
from modelhost.frontends.http.messages import (
    HttpRequest,
    HttpResponse,
    error_response,
    json_response,
    method_not_allowed,
    ok,
)
from modelhost.frontends.http.statuses import failure_response
from modelhost.frontends.restrictions import Restrictions, refusal
from modelhost.options import compile_forward_pattern
from modelhost.types import InferenceResponse, Parameters

log = logging.getLogger("modelhost.http")

# Triton's routing expressions (http_server.cc).
_HEALTH = re.compile(r"/v2(?:/health/(live|ready))?")
_MODEL = re.compile(
    r"/v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?"
)
_REPOSITORY = re.compile(r"/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))")
_SHARED_MEMORY = re.compile(r"/v2/(system|cuda)sharedmemory(?:/region/([^/]+))?/(status|register|unregister)")


# The restricted-API category of each action on a model (http_server.cc).
_MODEL_CATEGORIES = {
    "": "metadata",
    "ready": "health",
    "config": "model-config",
    "stats": "statistics",
    "trace/setting": "trace",
    "infer": "inference",
    "generate": "inference",
    "generate_stream": "inference",
}


def category_of(path: str) -> str:
    """The restricted-API category of a path ("" for one no endpoint serves)."""
    if path == "/v2/models/stats":
        return "statistics"
    if path.startswith("/v2/models/") and (m := _MODEL.fullmatch(path)):
        return _MODEL_CATEGORIES[m.group(3) or ""]
    if path == "/v2/logging":
        return "logging"
    if path == "/v2/trace/setting":
        return "trace"
    if m := _HEALTH.fullmatch(path):
        return "metadata" if m.group(1) is None else "health"
    if _REPOSITORY.fullmatch(path):
        return "model-repository"
    if _SHARED_MEMORY.fullmatch(path):
        return "shared-memory"
    if is_console_path(path):
        return "console"
    return ""


def restricted(restrictions: Restrictions, category: str, request: HttpRequest) -> HttpResponse | None:
    """The 403 a request of `category` gets when it lacks the header its category is restricted by."""
    why = refusal(restrictions, category, request.headers.get)
    if not why:
        return None
    log.info("refused %s %s: this API is restricted, %s", request.method, request.path, why)
    return error_response(403, f"This API is restricted, {why}")


class HttpRoutes:
    def __init__(
        self,
        engine: EngineAPI,
        max_input_size: int,
        restrictions: Restrictions | None = None,
        header_forward_pattern: str = "",
        console: ConsoleSettings | None = None,
    ) -> None:
        """`header_forward_pattern`: --http-header-forward-pattern ("" forwards no header); `console`: serve the
        web console (None: `/` is not found, as in Triton)."""
        self.engine = engine
        self.max_input_size = max_input_size
        self.restrictions = restrictions or {}
        self.header_forward = (
            compile_forward_pattern(header_forward_pattern) if header_forward_pattern else None
        )
        self.console = ConsoleRoutes(engine, console, self.restrictions) if console is not None else None

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("HTTP request: %s %s", request.method, request.path)  # Triton's verbose line
        if self.restrictions and (refused := self._refused(request)):
            return refused  # before anything else, as Triton: the method and the body are not looked at
        try:
            return await self._route(request)
        except ModelhostError as e:
            return failure_response(request.method, request.path, e)

    def _refused(self, request: HttpRequest) -> HttpResponse | None:
        category = category_of(request.path)
        if category == "console" and self.console is None:
            return None  # no console: its paths are unknown paths (404), whatever restricts the category
        return restricted(self.restrictions, category, request)

    async def _route(self, request: HttpRequest) -> HttpResponse:
        if request.too_large:
            raise self._too_large(request)
        path = request.path
        if path.startswith("/v2/models/") and path != "/v2/models/stats" and (m := _MODEL.fullmatch(path)):
            return await self._model(request, unquote(m.group(1)), m.group(2) or "", m.group(3) or "")
        if path == "/v2/logging":
            return await logging_settings(self.engine, request, self._read_json(request))
        if path == "/v2/models/stats":
            if request.method != "GET":
                return method_not_allowed()
            return await self._statistics("", "")
        if m := _HEALTH.fullmatch(path):
            if request.method != "GET":
                return method_not_allowed()
            which = m.group(1)
            if which is None:
                return json_response(await self.engine.server_metadata())
            healthy = await (self.engine.is_live() if which == "live" else self.engine.is_ready())
            return ok() if healthy else HttpResponse(400, b"")
        if m := _REPOSITORY.fullmatch(path):
            action = m.group(4) or "index"
            return await repository(
                self.engine, request, self._read_json(request), m.group(1), action, unquote(m.group(3) or "")
            )
        if m := _SHARED_MEMORY.fullmatch(path):
            kind = cast(ShmKind, m.group(1))
            return await shared_memory(
                self.engine, request, self._read_json(request), kind, unquote(m.group(2) or ""), m.group(3)
            )
        if path == "/v2/trace/setting":
            return await trace_settings(self.engine, request, self._read_json(request))
        if self.console is not None and is_console_path(path):
            return await self.console(request)
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
                return method_not_allowed()
            return await self.infer(request, name, version)
        if action in ("generate", "generate_stream"):
            return await self.generate(request, name, version, stream=action == "generate_stream")
        if request.method != "GET" and action not in ("trace/setting",):
            return method_not_allowed()
        if action == "":
            return json_response(await engine.model_metadata(name, version))
        if action == "ready":
            ready = await engine.model_ready(name, version)
            return ok() if ready else error_response(400, "Model version not ready")
        if action == "config":
            return json_response(config_to_json(await engine.model_config(name, version)))
        if action == "stats":
            return await self._statistics(name, version)
        if version:
            raise InvalidArgument("trace settings are per model, not per model version")
        return await trace_settings(self.engine, request, self._read_json(request), name)

    async def generate(
        self,
        request: HttpRequest,
        name: str,
        version: str,
        *,
        stream: bool,
        parameters: Parameters | None = None,
    ) -> HttpResponse:
        """The generate extension (/generate, /generate_stream; SageMaker's generate invocations)."""
        if request.method != "POST":
            return method_not_allowed()
        return await generate(
            self.engine,
            self._body(request),
            name,
            version,
            self.max_input_size,
            stream=stream,
            parameters=parameters,
        )

    async def _statistics(self, name: str, version: str) -> HttpResponse:
        return json_response({"model_stats": await self.engine.statistics(name, version)})

    def _read_json(self, request: HttpRequest) -> Callable[[str], dict[str, object]]:
        return lambda what: self._json_object(request, what)

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
        if self.header_forward is not None:
            decoded.request.parameters.update(
                forwarded_parameters(self.header_forward, request.headers.items())
            )
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
