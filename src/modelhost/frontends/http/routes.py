"""The HTTP port's endpoints, KServe v2's, Triton's extensions' and the console's, as one table (ROUTES), and their
dispatch with Triton's status codes and messages.

A request is matched against the table once (router.py): the match gives its endpoint, its path parameters and
its restricted-API category. Then Triton's order of checks: the category's restriction (403, before the method or
the body are looked at), a body over --http-max-input-size, an unknown path (404), a version std::stol cannot
parse, a method the path does not serve (405), and the endpoint. Inference is answered in infer.py, generate in
generate.py, the extensions that read a body in extensions.py.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import cast

from modelhost.config import config_to_json
from modelhost.engine_api import EngineAPI, ShmKind
from modelhost.errors import InvalidArgument, ModelhostError
from modelhost.frontends.console.routes import ConsoleRoutes
from modelhost.frontends.console.settings import ConsoleSettings
from modelhost.frontends.http import extensions
from modelhost.frontends.http.bodies import body_too_large, json_object, request_body
from modelhost.frontends.http.generate import generate
from modelhost.frontends.http.infer import InferEndpoint
from modelhost.frontends.http.messages import (
    HttpRequest,
    HttpResponse,
    error_response,
    json_response,
    method_not_allowed,
    ok,
)
from modelhost.frontends.http.router import ANY, Route, Router
from modelhost.frontends.http.statuses import failure_response
from modelhost.frontends.restrictions import Restrictions, refusal
from modelhost.options import compile_forward_pattern
from modelhost.types import Parameters

log = logging.getLogger("modelhost.http")

# A route's path parameters, by name.
Params = dict[str, str]
Endpoint = Callable[["HttpRoutes", HttpRequest, Params], Awaitable[HttpResponse]]


def restricted(restrictions: Restrictions, category: str, request: HttpRequest) -> HttpResponse | None:
    """The 403 a request of `category` gets when it lacks the header its category is restricted by."""
    why = refusal(restrictions, category, request.headers.get)
    if not why:
        return None
    log.info("refused %s %s: this API is restricted, %s", request.method, request.path, why)
    return error_response(403, f"This API is restricted, {why}")


class HttpRoutes:
    """The HTTP port's handler (protocol.py calls it with each request): the table's endpoints over `engine`."""

    __slots__ = ("console", "engine", "infer", "max_input_size", "restrictions", "router")

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
        forward = compile_forward_pattern(header_forward_pattern) if header_forward_pattern else None
        # The inference endpoint (SageMaker's invocations call it too).
        self.infer = InferEndpoint(engine, max_input_size, forward)
        self.console = ConsoleRoutes(engine, console, self.restrictions) if console is not None else None
        # Without the console its paths are unknown paths (404), whatever restricts its category.
        self.router = _ROUTER if console is not None else _ROUTER_WITHOUT_CONSOLE

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("HTTP request: %s %s", request.method, request.path)  # Triton's verbose line
        matched = self.router.match(request.method, request.path)
        if self.restrictions:
            # Before anything else, as Triton: the method and the body are not looked at.
            category = matched[0].category if matched is not None else ""
            if refused := restricted(self.restrictions, category, request):
                return refused
        try:
            if request.too_large:
                raise body_too_large(request, self.max_input_size)
            if matched is None:
                return error_response(404, "Not Found")
            _, endpoint, params = matched
            version = params.get("version")
            if version and len(version) > 18:  # fewer digits are within std::stol's range
                _check_version(version)
            if endpoint is None:
                return method_not_allowed()
            return await endpoint(self, request, params)
        except ModelhostError as e:
            return failure_response(request.method, request.path, e)

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
        body = request_body(request, self.max_input_size)
        return await generate(
            self.engine, body, name, version, self.max_input_size, stream=stream, parameters=parameters
        )

    def read_json(self, request: HttpRequest) -> extensions.ReadJson:
        """What reads the request's body as a JSON object, when the endpoint is ready to."""
        return lambda what: json_object(request, self.max_input_size, what)


def _check_version(version: str) -> None:
    # The route admits any digits; Triton parses them with std::stol.
    digits = version.lstrip("0")
    if len(digits) > 19 or int(digits or "0") >= 2**63:
        raise InvalidArgument(
            f"failed to get model version from specified version string '{version}' (details: stol), "
            "version should be an integral value > 0"
        )


# -- the endpoints -----------------------------------------------------------------------------------------------


async def _server_metadata(routes: HttpRoutes, request: HttpRequest, path: Params) -> HttpResponse:
    return json_response(await routes.engine.server_metadata())


async def _live(routes: HttpRoutes, request: HttpRequest, path: Params) -> HttpResponse:
    return ok() if await routes.engine.is_live() else HttpResponse(400, b"")


async def _ready(routes: HttpRoutes, request: HttpRequest, path: Params) -> HttpResponse:
    return ok() if await routes.engine.is_ready() else HttpResponse(400, b"")


async def _model_metadata(routes: HttpRoutes, request: HttpRequest, path: Params) -> HttpResponse:
    return json_response(await routes.engine.model_metadata(path["model"], path["version"]))


async def _model_ready(routes: HttpRoutes, request: HttpRequest, path: Params) -> HttpResponse:
    ready = await routes.engine.model_ready(path["model"], path["version"])
    return ok() if ready else error_response(400, "Model version not ready")


async def _model_config(routes: HttpRoutes, request: HttpRequest, path: Params) -> HttpResponse:
    return json_response(config_to_json(await routes.engine.model_config(path["model"], path["version"])))


def _infer(routes: HttpRoutes, request: HttpRequest, path: Params) -> Awaitable[HttpResponse]:
    return routes.infer(request, path["model"], path["version"])


def _generate(routes: HttpRoutes, request: HttpRequest, path: Params) -> Awaitable[HttpResponse]:
    return routes.generate(request, path["model"], path["version"], stream=False)


def _generate_stream(routes: HttpRoutes, request: HttpRequest, path: Params) -> Awaitable[HttpResponse]:
    return routes.generate(request, path["model"], path["version"], stream=True)


async def _statistics(routes: HttpRoutes, request: HttpRequest, path: Params) -> HttpResponse:
    """Every model's (/v2/models/stats), or one model's."""
    stats = await routes.engine.statistics(path.get("model", ""), path.get("version", ""))
    return json_response({"model_stats": stats})


async def _trace_settings(routes: HttpRoutes, request: HttpRequest, path: Params) -> HttpResponse:
    """The server's trace settings, or a model's."""
    return json_response(await routes.engine.trace_settings(path.get("model", "")))


async def _update_trace_settings(routes: HttpRoutes, request: HttpRequest, path: Params) -> HttpResponse:
    changes = json_object(request, routes.max_input_size, "trace settings")
    return json_response(await routes.engine.trace_settings(path.get("model", ""), changes))


async def _version_trace_settings(routes: HttpRoutes, request: HttpRequest, path: Params) -> HttpResponse:
    raise InvalidArgument("trace settings are per model, not per model version")


async def _logging_settings(routes: HttpRoutes, request: HttpRequest, path: Params) -> HttpResponse:
    return json_response(await routes.engine.logging_settings())


async def _update_logging_settings(routes: HttpRoutes, request: HttpRequest, path: Params) -> HttpResponse:
    changes = json_object(request, routes.max_input_size, "logging settings")
    return json_response(await routes.engine.logging_settings(changes))


def _repository_index(routes: HttpRoutes, request: HttpRequest, path: Params) -> Awaitable[HttpResponse]:
    return extensions.repository_index(routes.engine, path["repository"], routes.read_json(request))


def _load_or_unload(routes: HttpRoutes, request: HttpRequest, path: Params) -> Awaitable[HttpResponse]:
    return extensions.load_or_unload(
        routes.engine, path["repository"], path["action"], path["model"], routes.read_json(request)
    )


async def _shared_memory_status(routes: HttpRoutes, request: HttpRequest, path: Params) -> HttpResponse:
    return json_response(await routes.engine.shared_memory_status(cast(ShmKind, path["kind"]), path["region"]))


async def _register_shared_memory(routes: HttpRoutes, request: HttpRequest, path: Params) -> HttpResponse:
    kind = cast(ShmKind, path["kind"])
    await extensions.register_shared_memory(routes.engine, kind, path["region"], routes.read_json(request))
    return ok()


async def _unregister_shared_memory(routes: HttpRoutes, request: HttpRequest, path: Params) -> HttpResponse:
    await routes.engine.unregister_shared_memory(cast(ShmKind, path["kind"]), path["region"])
    return ok()


def _console(routes: HttpRoutes, request: HttpRequest, path: Params) -> Awaitable[HttpResponse]:
    assert routes.console is not None  # its routes are only there when it is served
    return routes.console(request)


# -- the table ---------------------------------------------------------------------------------------------------

GET = ("GET",)
POST = ("POST",)
EVERY = (ANY,)
# Triton's routing expressions (http_server.cc), with the parameters named.
MODEL = "/v2/models/{model}[/versions/{version:int}]"
REPOSITORY = "/v2/repository[/{repository}]"
REPOSITORY_CONTROL = REPOSITORY + "/models/{model}/{action:load|unload}"
SHARED_MEMORY = "/v2/{kind:system|cuda}sharedmemory[/region/{region}]"

# Every endpoint of the HTTP port: its methods, path, endpoint and restricted-API category (http_server.cc).
ROUTES: tuple[Route[Endpoint], ...] = (
    Route(GET, "/v2", _server_metadata, "metadata"),
    Route(GET, "/v2/health/live", _live, "health"),
    Route(GET, "/v2/health/ready", _ready, "health"),
    Route(POST, MODEL + "/infer", _infer, "inference"),  # first: the most frequent is matched the quickest
    Route(GET, MODEL, _model_metadata, "metadata"),
    Route(GET, MODEL + "/ready", _model_ready, "health"),
    Route(GET, MODEL + "/config", _model_config, "model-config"),
    Route(POST, MODEL + "/generate", _generate, "inference"),
    Route(POST, MODEL + "/generate_stream", _generate_stream, "inference"),
    Route(GET, MODEL + "/stats", _statistics, "statistics"),
    Route(GET, "/v2/models/stats", _statistics, "statistics"),  # not a model called "stats"
    Route(GET, "/v2/models/{model}/trace/setting", _trace_settings, "trace"),
    Route(POST, "/v2/models/{model}/trace/setting", _update_trace_settings, "trace"),
    # Refused whatever the method: the error names what is wrong.
    Route(EVERY, "/v2/models/{model}/versions/{version:int}/trace/setting", _version_trace_settings, "trace"),
    Route(GET, "/v2/trace/setting", _trace_settings, "trace"),
    Route(POST, "/v2/trace/setting", _update_trace_settings, "trace"),
    Route(GET, "/v2/logging", _logging_settings, "logging"),
    Route(POST, "/v2/logging", _update_logging_settings, "logging"),
    Route(POST, REPOSITORY + "/index", _repository_index, "model-repository"),
    Route(POST, REPOSITORY_CONTROL, _load_or_unload, "model-repository"),
    Route(GET, SHARED_MEMORY + "/status", _shared_memory_status, "shared-memory"),
    Route(POST, SHARED_MEMORY + "/register", _register_shared_memory, "shared-memory"),
    Route(POST, SHARED_MEMORY + "/unregister", _unregister_shared_memory, "shared-memory"),
    # modelhost's web console (console/routes.py): it answers any method but GET with tritonserver's 404.
    Route(EVERY, "/", _console, "console"),
    Route(EVERY, "/console/{path:path}", _console, "console"),
)

_ROUTER = Router(ROUTES)
_ROUTER_WITHOUT_CONSOLE = Router(route for route in ROUTES if route.category != "console")
