"""The SageMaker routes: /ping, /invocations, and the multi-model endpoint's /models API.

Bodies are the KServe v2 ones of the HTTP frontend (its decoding and encoding serve here too); binary tensors
come with `Content-Type: application/vnd.sagemaker-triton.binary+json;json-header-size=N` instead of the
Inference-Header-Content-Length header, and answers mirror it. Status codes follow Triton's SageMaker server
except where it answers 400 for a fault of the server or 500 for a client's malformed body: each such difference
is listed in docs/sagemaker.md.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote

import orjson

from modelhost.engine_api import EngineAPI
from modelhost.errors import Conflict, InvalidArgument, ModelhostError, NotFound, Unavailable
from modelhost.frontends.http.binary_mime import as_kserve
from modelhost.frontends.http.messages import HttpRequest, HttpResponse, error_response
from modelhost.frontends.http.routes import HttpRoutes, restricted
from modelhost.frontends.http.statuses import failure_response
from modelhost.frontends.sagemaker.model_urls import locate_model
from modelhost.frontends.sagemaker.settings import SageMakerSettings
from modelhost.types import Parameters

log = logging.getLogger("modelhost.sagemaker")

BINARY_CONTENT_TYPE = "application/vnd.sagemaker-triton.binary+json;json-header-size="
TARGET_MODEL = "x-amzn-sagemaker-target-model"
CUSTOM_ATTRIBUTES = "x-amzn-sagemaker-custom-attributes"
# The request parameter a model finds the custom attributes in (the header's name, as header forwarding names it).
CUSTOM_ATTRIBUTES_PARAMETER = "X-Amzn-SageMaker-Custom-Attributes"
_MODELS = re.compile(r"/models(?:/([^/]+))?(/invoke)?")


def _category(request: HttpRequest) -> str:
    """The restricted-API category of a SageMaker route (sagemaker_server.cc)."""
    if request.path == "/ping":
        return "health"
    if request.path == "/invocations":
        return "inference"
    match = _MODELS.fullmatch(request.path)
    if match is None:
        return ""
    return "inference" if match.group(2) else "model-repository"


class SageMakerRoutes:
    def __init__(self, engine: EngineAPI, http: HttpRoutes, settings: SageMakerSettings) -> None:
        self.engine = engine
        self.http = http
        self.settings = settings

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        restrictions = self.http.restrictions
        if restrictions and (refused := restricted(restrictions, _category(request), request)):
            return refused
        try:
            return await self._route(request)
        except ModelhostError as e:
            return failure_response(request.method, request.path, e)

    async def _route(self, request: HttpRequest) -> HttpResponse:
        if request.too_large:
            raise InvalidArgument(
                f"request JSON size of {request.headers.get('content-length', '?')} bytes exceeds the maximum "
                f"allowed input size of {self.http.max_input_size} bytes. Use --http-max-input-size to increase "
                "the limit."
            )
        path = request.path
        if path == "/ping":
            if request.method != "GET":
                return _method_not_allowed()
            return await self._ping()
        if path == "/invocations":
            if request.method != "POST":
                return _method_not_allowed()
            return await self._infer(request, self.settings.default_model, self.settings.inference_type)
        match = _MODELS.fullmatch(path)
        if match is None:
            return error_response(404, "Not Found")
        name = unquote(match.group(1) or "")
        if match.group(2):
            if request.method != "POST":
                return _method_not_allowed()
            return await self._invoke(request, name)
        if request.method == "GET":
            return await self._get(name) if name else await self._list()
        if request.method == "POST" and not name:
            return await self._load(request)
        if request.method == "DELETE" and name:
            return await self._unload(request, name)
        return _method_not_allowed()

    # -- health and inference ----------------------------------------------------------------------------------

    async def _ping(self) -> HttpResponse:
        live = await self.engine.is_live()
        ok = live if self.settings.ping_mode == "live" else await self.engine.is_ready()
        if ok:
            return HttpResponse(200, b"")
        # Triton answers 400; a server that is not (yet) ready is unavailable, which SageMaker treats the same.
        return error_response(503, "Server is not ready" if live else "Server is not live")

    async def _infer(self, request: HttpRequest, name: str, inference_type: str) -> HttpResponse:
        sagemaker_request = _as_kserve(request)
        parameters: Parameters = {}
        attributes = request.headers.get(CUSTOM_ATTRIBUTES)
        if attributes is not None:
            parameters[CUSTOM_ATTRIBUTES_PARAMETER] = attributes
        if inference_type != "infer":
            return await self.http.generate(
                sagemaker_request, name, "", stream=inference_type == "generate_stream", parameters=parameters
            )
        response = await self.http.infer(sagemaker_request, name, "", parameters)
        return _as_sagemaker(response)

    async def _invoke(self, request: HttpRequest, name: str) -> HttpResponse:
        # The models loaded through POST /models by their `model_name` (SageMaker's key), kept by the engine.
        loaded = (await self.engine.model_aliases(name)).get(name)
        if loaded is None:
            raise NotFound(f"model '{name}' is not loaded: load it with POST /models first")
        target = request.headers.get(TARGET_MODEL) or loaded["target"]
        # A model unloaded to keep within --model-memory-budget (or for idleness) is still loaded as far as
        # SageMaker knows: it comes back on its next request.
        await self.engine.reload_if_evicted(target)
        return await self._infer(request, target, "infer")

    # -- the multi-model API -----------------------------------------------------------------------------------

    async def _list(self) -> HttpResponse:
        aliases = await self.engine.model_aliases()
        models = [{"modelName": key, "modelUrl": loaded["url"]} for key, loaded in aliases.items()]
        return HttpResponse(200, orjson.dumps({"models": models}))

    async def _get(self, name: str) -> HttpResponse:
        loaded = (await self.engine.model_aliases(name)).get(name)
        if loaded is None:
            raise NotFound(f"model '{name}' is not loaded")
        return HttpResponse(200, orjson.dumps({"modelName": name, "modelUrl": loaded["url"]}))

    async def _load(self, request: HttpRequest) -> HttpResponse:
        doc = _json_object(request.body)
        model_name = doc.get("model_name", "")
        if not isinstance(model_name, str):
            raise InvalidArgument("Unable to parse 'model_name': attempt to access JSON non-string as string")
        target = request.headers.get(TARGET_MODEL) or model_name
        if not target:
            raise InvalidArgument(
                "the load request names no model: give 'model_name' in the body or the "
                "X-Amzn-SageMaker-Target-Model header"
            )
        alias = model_name or target
        if model_name and await self.engine.model_aliases(model_name):
            raise Conflict(f"failed to register '{target}', there is a conflicting mapping for '{target}'")
        location = locate_model(doc.get("url"), self.settings.model_root)
        names = {target: str(location.model_dir), **{n: str(d) for n, d in location.companions.items()}}
        # The target first: its mapping takes precedence over a repository model of that name.
        await self.engine.register_models(alias, location.model_url, names)
        log.info("Loading SageMaker TargetModel: %s", target)
        try:
            await self.engine.load_model(target, {}, files_base64=True)
        except ModelhostError as e:
            await self.engine.forget_models(alias)
            await self._unload_quietly(target)
            raise _load_failure(e) from e
        return HttpResponse(200, b"")

    async def _unload(self, request: HttpRequest, name: str) -> HttpResponse:
        loaded = (await self.engine.model_aliases(name)).get(name)
        if loaded is None:
            raise NotFound(f"model '{name}' is not loaded")
        target = request.headers.get(TARGET_MODEL) or loaded["target"]
        await self.engine.unload_model(target, {"unload_dependents": True})
        for companion in loaded["names"]:
            if companion != target:
                await self._unload_quietly(companion)
        await (
            self.engine.settled()
        )  # every version closed: its memory is back before SageMaker loads the next
        await self.engine.forget_models(name)
        return HttpResponse(200, b"")

    async def _unload_quietly(self, name: str) -> None:
        try:
            await self.engine.unload_model(name, {})
        except ModelhostError as e:
            log.warning("failed to unload '%s' after its load failed: %s", name, e)


def _method_not_allowed() -> HttpResponse:
    return error_response(405, "Method Not Allowed")


def _json_object(body: bytes) -> dict[str, object]:
    if not body.strip():
        raise InvalidArgument('the load request has no body: expected {"model_name": ..., "url": ...}')
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise InvalidArgument(f"failed to parse the request JSON buffer: {e}") from e
    if not isinstance(doc, dict):
        raise InvalidArgument("the load request must be a JSON object")
    return doc


def _load_failure(error: ModelhostError) -> ModelhostError:
    """A failed load as SageMaker's frontend needs it: 507 where memory ran out (the platform then unloads other
    models and tries again), the error's own status otherwise (Triton answers 400 for every other failure)."""
    if isinstance(error, Unavailable) and "explicit model load / unload is not allowed" in str(error):
        return Unavailable(f"{error} (the SageMaker model API needs --model-control-mode=explicit)")
    return error


def _as_kserve(request: HttpRequest) -> HttpRequest:
    return as_kserve(request, BINARY_CONTENT_TYPE)


def _as_sagemaker(response: HttpResponse) -> HttpResponse:
    """An inference answer with binary outputs says its JSON header's size in its Content-Type."""
    for i, (name, value) in enumerate(response.headers):
        if name.lower() == "inference-header-content-length":
            del response.headers[i]
            response.content_type = BINARY_CONTENT_TYPE + value
            break
    return response
