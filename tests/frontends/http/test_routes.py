"""The HTTP routes against a fake engine, in process: what each endpoint asks of the EngineAPI and how it answers
(statuses, bodies, Triton's messages), without a server process."""

from __future__ import annotations

import asyncio
import gzip
import struct
from typing import Any

import numpy as np
import orjson
import pytest

from fake_engine import DECOUPLED, MODEL, FakeEngine
from modelhost.engine_api import CallContext
from modelhost.frontends.http.infer import LARGE_BODY
from modelhost.frontends.http.messages import HttpRequest, HttpResponse, method_not_allowed
from modelhost.frontends.http.routes import _ROUTER, ROUTES, HttpRoutes
from modelhost.frontends.restrictions import CATEGORIES as RESTRICTABLE
from modelhost.types import InferenceRequest, InferenceResponse, ShmWindow


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
def routes(engine: FakeEngine) -> HttpRoutes:
    return HttpRoutes(engine, max_input_size=1 << 20)


def call(
    routes: HttpRoutes, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> HttpResponse:
    raw = b"" if body is None else body if isinstance(body, bytes) else orjson.dumps(body)
    return asyncio.run(routes(HttpRequest(method, path, "", headers or {}, raw, received_ns=123)))


def doc(response: HttpResponse) -> Any:
    return orjson.loads(response.body)


def test_health_and_metadata(routes: HttpRoutes, engine: FakeEngine) -> None:
    assert call(routes, "GET", "/v2/health/live").status == 200
    assert call(routes, "GET", "/v2/health/ready").status == 200
    engine.ready = False
    assert call(routes, "GET", "/v2/health/ready").status == 400
    assert doc(call(routes, "GET", "/v2"))["name"] == "fake"
    assert call(routes, "POST", "/v2/health/live").status == 405
    assert call(routes, "GET", "/v2/nothing").status == 404


def test_model_metadata_ready_config_and_statistics(routes: HttpRoutes) -> None:
    assert doc(call(routes, "GET", f"/v2/models/{MODEL}"))["platform"] == "python"
    assert call(routes, "GET", f"/v2/models/{MODEL}/ready").status == 200
    assert call(routes, "GET", f"/v2/models/{DECOUPLED}/ready").status == 400
    config = doc(call(routes, "GET", f"/v2/models/{MODEL}/config"))
    assert config["name"] == MODEL and config["max_batch_size"] == 8
    assert config["input"][0]["data_type"] == "TYPE_FP32"
    stats = doc(call(routes, "GET", "/v2/models/stats"))
    assert stats["model_stats"][0]["name"] == MODEL
    missing = call(routes, "GET", "/v2/models/nope/config")
    assert missing.status == 404 and "unknown model" in doc(missing)["error"]
    too_big = call(routes, "GET", f"/v2/models/{MODEL}/versions/{2**63}")
    assert too_big.status == 400 and "stol" in doc(too_big)["error"]


def test_infer_json_passes_the_request_and_how_it_came(routes: HttpRoutes, engine: FakeEngine) -> None:
    body = {
        "id": "r1",
        "parameters": {"priority": 2, "custom": "x"},
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1.5, 2.5]}],
    }
    response = call(routes, "POST", f"/v2/models/{MODEL}/infer", body, {"traceparent": "00-ab-cd-01"})
    assert response.status == 200, response.body
    answer = doc(response)
    assert answer["id"] == "r1" and answer["outputs"][0]["data"] == [1.5, 2.5]
    assert answer["parameters"] == {"answered": True}
    (request,) = engine.requests
    assert request.priority == 2 and request.parameters == {"custom": "x"}
    (context,) = engine.contexts
    assert context is not None
    assert (context.protocol, context.received_ns, context.parent()) == ("HTTP", 123, "00-ab-cd-01")


def test_infer_binary_output(routes: HttpRoutes) -> None:
    body = {
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1.0, 2.0]}],
        "outputs": [{"name": "INPUT0", "parameters": {"binary_data": True}}],
    }
    response = call(routes, "POST", f"/v2/models/{MODEL}/infer", body)
    length = int(dict(response.headers)["Inference-Header-Content-Length"])
    assert struct.unpack("<2f", response.body[length:]) == (1.0, 2.0)


def test_a_raw_binary_request_is_decoded_by_the_model_signature(
    routes: HttpRoutes, engine: FakeEngine
) -> None:
    raw = struct.pack("<3f", 1, 2, 3)
    response = call(
        routes, "POST", f"/v2/models/{MODEL}/infer", raw, {"inference-header-content-length": "0"}
    )
    assert response.status == 200, response.body
    (request,) = engine.requests
    assert request.inputs[0].shape == [1, 3]  # the batch dimension, and the one variable dim from the size


def test_inputs_and_outputs_in_shared_memory_go_to_the_engine_as_windows(
    routes: HttpRoutes, engine: FakeEngine
) -> None:
    shm = {"shared_memory_region": "in", "shared_memory_byte_size": 8, "shared_memory_offset": 16}
    body = {
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "parameters": shm}],
        "outputs": [
            {"name": "INPUT0", "parameters": {"shared_memory_region": "out", "shared_memory_byte_size": 8}}
        ],
    }
    call(routes, "POST", f"/v2/models/{MODEL}/infer", body)
    (request,) = engine.requests
    assert request.shared_memory
    assert request.inputs[0].shm == ShmWindow("in", 16, 8)
    assert request.outputs[0].shm == ShmWindow("out", 0, 8)


def test_engine_errors_answer_by_kind(routes: HttpRoutes) -> None:
    body = {
        "parameters": {"fail": "yes"},
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}],
    }
    failed = call(routes, "POST", f"/v2/models/{MODEL}/infer", body)
    assert failed.status == 501 and doc(failed)["error"] == "asked to fail: yes"
    decoupled = call(routes, "POST", f"/v2/models/{DECOUPLED}/infer", {"inputs": []})
    assert decoupled.status == 501 and "decoupled transaction policy" in doc(decoupled)["error"]
    assert call(routes, "GET", f"/v2/models/{MODEL}/infer").status == 405


def test_repository_and_control(routes: HttpRoutes, engine: FakeEngine) -> None:
    assert doc(call(routes, "POST", "/v2/repository/index", {}))[0]["name"] == MODEL
    assert (
        call(routes, "POST", "/v2/repository/models/m/load", {"parameters": {"config": "{}"}}).status == 200
    )
    assert call(routes, "POST", "/v2/repository/models/m/unload", {"parameters": {}}).status == 200
    assert ("load_model", ("m", {"config": "{}"}, True)) in engine.calls
    assert ("unload_model", ("m", {})) in engine.calls
    bad = call(routes, "POST", "/v2/repository/index", {"ready": "yes"})
    assert bad.status == 400 and doc(bad)["error"] == "'ready' must be a boolean"
    assert call(routes, "POST", "/v2/repository/r/index", {}).status == 501


def test_logging_and_trace_settings(routes: HttpRoutes, engine: FakeEngine) -> None:
    assert doc(call(routes, "POST", "/v2/logging", {"log_verbose_level": 1}))["log_verbose_level"] == 1
    refused = call(routes, "POST", "/v2/logging", {"log_file": "x"})
    assert refused.status == 400 and "log file location" in doc(refused)["error"]
    assert doc(call(routes, "GET", f"/v2/models/{MODEL}/trace/setting"))["trace_rate"] == "1000"
    call(routes, "POST", "/v2/trace/setting", {"trace_rate": "5"})
    assert ("trace_settings", ("", {"trace_rate": "5"})) in engine.calls


def test_shared_memory_endpoints(routes: HttpRoutes, engine: FakeEngine) -> None:
    body = {"key": "/k", "offset": 4, "byte_size": 8}
    assert call(routes, "POST", "/v2/systemsharedmemory/region/r/register", body).status == 200
    assert ("register_system_shared_memory", ("r", "/k", 4, 8)) in engine.calls
    assert doc(call(routes, "GET", "/v2/systemsharedmemory/status"))[0]["key"] == "/k"
    assert call(routes, "POST", "/v2/systemsharedmemory/region/r/unregister").status == 200
    assert ("unregister_shared_memory", ("system", "r")) in engine.calls
    cuda = call(routes, "POST", "/v2/cudasharedmemory/region/c/register", {})
    assert cuda.status == 501 and "needs a GPU" in doc(cuda)["error"]


def test_generate_and_generate_stream(routes: HttpRoutes, engine: FakeEngine) -> None:
    one = call(routes, "POST", f"/v2/models/{MODEL}/generate", {"INPUT0": [1.0, 2.0]})
    assert one.status == 200 and doc(one)["INPUT0"] == [1.0, 2.0]
    refused = call(routes, "POST", f"/v2/models/{DECOUPLED}/generate_stream", {})
    assert refused.status == 400 and refused.stream is None  # a refused request: JSON, not events
    assert ("check_request", DECOUPLED) in engine.calls

    async def events() -> list[bytes]:
        response = await routes(
            HttpRequest("POST", f"/v2/models/{DECOUPLED}/generate_stream", "", {}, b'{"INPUT0": [3.0]}')
        )
        assert response.status == 200 and response.stream is not None
        return [event async for event in response.stream]

    (event,) = asyncio.run(events())  # the empty final response is no event
    assert event.startswith(b"data: ") and b"3.0" in event


def test_unavailable_answers_say_when_to_try_again(routes: HttpRoutes, engine: FakeEngine) -> None:
    from modelhost.errors import Rejected

    async def full(request: Any, context: Any = None) -> Any:
        raise Rejected("Exceeds maximum queue size")

    engine.infer = full  # type: ignore[method-assign]
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    refused = call(routes, "POST", f"/v2/models/{MODEL}/infer", body)
    assert refused.status == 503 and doc(refused)["error"] == "Exceeds maximum queue size"
    assert ("Retry-After", "1") in refused.headers
    ok = call(routes, "GET", "/v2/health/live")
    assert ("Retry-After", "1") not in ok.headers


# -- the route table -------------------------------------------------------------------------------------------

METHODS = ("GET", "POST", "PUT", "DELETE", "HEAD", "PATCH")
# A path of every endpoint, and the methods it serves: any other method is answered 405, as before the table.
ENDPOINTS = [
    ("/v2", {"GET"}),
    ("/v2/health/live", {"GET"}),
    ("/v2/health/ready", {"GET"}),
    (f"/v2/models/{MODEL}", {"GET"}),
    (f"/v2/models/{MODEL}/versions/1", {"GET"}),
    (f"/v2/models/{MODEL}/ready", {"GET"}),
    (f"/v2/models/{MODEL}/versions/1/ready", {"GET"}),
    (f"/v2/models/{MODEL}/config", {"GET"}),
    (f"/v2/models/{MODEL}/stats", {"GET"}),
    (f"/v2/models/{MODEL}/infer", {"POST"}),
    (f"/v2/models/{MODEL}/versions/1/infer", {"POST"}),
    (f"/v2/models/{MODEL}/generate", {"POST"}),
    (f"/v2/models/{MODEL}/generate_stream", {"POST"}),
    ("/v2/models/stats", {"GET"}),
    (f"/v2/models/{MODEL}/trace/setting", {"GET", "POST"}),
    ("/v2/trace/setting", {"GET", "POST"}),
    ("/v2/logging", {"GET", "POST"}),
    ("/v2/repository/index", {"POST"}),
    ("/v2/repository/r/index", {"POST"}),
    ("/v2/repository/models/m/load", {"POST"}),
    ("/v2/repository/r/models/m/unload", {"POST"}),
    ("/v2/systemsharedmemory/status", {"GET"}),
    ("/v2/systemsharedmemory/region/r/status", {"GET"}),
    ("/v2/systemsharedmemory/register", {"POST"}),
    ("/v2/systemsharedmemory/region/r/unregister", {"POST"}),
    ("/v2/cudasharedmemory/region/c/status", {"GET"}),
    ("/v2/cudasharedmemory/region/c/register", {"POST"}),
    ("/v2/cudasharedmemory/unregister", {"POST"}),
]
# The answers of any method: the console's (404 but for GET) and a model version's trace settings (400).
EVERY_METHOD = ["/", "/console/assets/console.js", f"/v2/models/{MODEL}/versions/1/trace/setting"]


def test_every_route_of_the_table_is_covered_here() -> None:
    covered = {_pattern(path) for path, _ in ENDPOINTS} | {_pattern(path) for path in EVERY_METHOD}
    assert covered == {route.pattern for route in ROUTES}


def _pattern(path: str) -> str:
    matched = _ROUTER.match("GET", path)
    assert matched is not None, path
    return matched[0].pattern


@pytest.mark.parametrize(("path", "methods"), ENDPOINTS)
def test_each_path_serves_its_methods_and_answers_the_others_405(
    routes: HttpRoutes, path: str, methods: set[str]
) -> None:
    for method in METHODS:
        answer = call(routes, method, path)
        if method in methods:
            assert answer.status not in (404, 405), (method, path, answer.body)
        else:
            assert (answer.status, answer.body) == (405, method_not_allowed().body), (method, path)
            assert answer.body == b'{"error":"Method Not Allowed"}'


@pytest.mark.parametrize(
    "path",
    [
        "",
        "/",  # no console
        "/console/assets/console.js",
        "/v2/",
        "/v2/health",
        "/v2/nothing",
        "/v2/models",
        "/v2/models/",
        "/v2/models//infer",
        f"/v2/models/{MODEL}/",
        f"/v2/models/{MODEL}/versions",
        f"/v2/models/{MODEL}/versions/x",
        f"/v2/models/{MODEL}/versions/-1/infer",
        f"/v2/models/{MODEL}/infer/",
        f"/v2/models/{MODEL}/trace",
        f"/v2/models/{MODEL}/bogus",
        "/v2/logging/",
        "/v2/repository",
        "/v2/repository/models/m",
        "/v2/repository/r/models/m/other",
        "/v2/sharedmemory/status",
        "/v2/gpusharedmemory/status",
        "/v2/systemsharedmemory/region/status",
        "/v2/systemsharedmemory/region/r",
    ],
)
def test_an_unknown_path_is_404_whatever_the_method(routes: HttpRoutes, path: str) -> None:
    for method in ("GET", "POST", "PUT"):
        answer = call(routes, method, path)
        assert (answer.status, doc(answer)) == (404, {"error": "Not Found"}), (method, path)


def test_path_parameters_names_unquoted_versions_as_given(routes: HttpRoutes, engine: FakeEngine) -> None:
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    assert call(routes, "POST", "/v2/models/e%63ho/versions/0003/infer", body).status == 200
    (request,) = engine.requests
    assert (request.model_name, request.model_version) == (MODEL, "0003")
    assert call(routes, "POST", "/v2/repository/models/my%20model/load", {}).status == 200
    assert ("load_model", ("my model", {}, True)) in engine.calls
    assert call(routes, "POST", "/v2/systemsharedmemory/region/a%2Fb/unregister").status == 200
    assert ("unregister_shared_memory", ("system", "a/b")) in engine.calls
    assert call(routes, "POST", "/v2/cudasharedmemory/unregister").status == 200
    assert ("unregister_shared_memory", ("cuda", "")) in engine.calls
    # /v2/models/stats is every model's statistics, not a model called "stats"; below it, "stats" is a model.
    assert doc(call(routes, "GET", "/v2/models/stats"))["model_stats"][0]["name"] == MODEL
    not_ready = call(routes, "GET", "/v2/models/stats/ready")
    assert (not_ready.status, doc(not_ready)) == (400, {"error": "Model version not ready"})
    # "models" is a repository's name here (a repository name is not supported).
    assert call(routes, "POST", "/v2/repository/models/index", {}).status == 501


@pytest.mark.parametrize("version", [str(2**63), "9" * 20, "1" * 5000])
def test_a_version_past_int64_is_refused_before_the_method_is_looked_at(routes: HttpRoutes, version: str) -> None:
    for method, action in (("GET", ""), ("PUT", "/infer"), ("POST", "/ready"), ("DELETE", "/trace/setting")):
        answer = call(routes, method, f"/v2/models/{MODEL}/versions/{version}{action}")
        assert answer.status == 400, (method, action)
        assert doc(answer)["error"] == (
            f"failed to get model version from specified version string '{version}' (details: stol), "
            "version should be an integral value > 0"
        )
    assert call(routes, "GET", f"/v2/models/{MODEL}/versions/{2**63 - 1}").status == 200
    assert call(routes, "GET", f"/v2/models/{MODEL}/versions/{'0' * 30}1").status == 200


def test_a_model_versions_trace_settings_are_refused_whatever_the_method(routes: HttpRoutes) -> None:
    for method in METHODS:
        answer = call(routes, method, f"/v2/models/{MODEL}/versions/1/trace/setting")
        assert (answer.status, doc(answer)) == (
            400,
            {"error": "trace settings are per model, not per model version"},
        )


# The restricted-API categories of the paths, as http_server.cc has them (and as `category_of` gave them before
# the table: its `_MODEL_CATEGORIES` for a model's actions).
CATEGORIES = [
    ("/v2", "metadata"),
    ("/v2/health/live", "health"),
    ("/v2/health/ready", "health"),
    (f"/v2/models/{MODEL}", "metadata"),
    (f"/v2/models/{MODEL}/versions/2", "metadata"),
    (f"/v2/models/{MODEL}/ready", "health"),
    (f"/v2/models/{MODEL}/config", "model-config"),
    (f"/v2/models/{MODEL}/stats", "statistics"),
    (f"/v2/models/{MODEL}/trace/setting", "trace"),
    (f"/v2/models/{MODEL}/versions/2/trace/setting", "trace"),
    (f"/v2/models/{MODEL}/infer", "inference"),
    (f"/v2/models/{MODEL}/versions/2/infer", "inference"),
    (f"/v2/models/{MODEL}/generate", "inference"),
    (f"/v2/models/{MODEL}/generate_stream", "inference"),
    ("/v2/models/stats", "statistics"),
    ("/v2/logging", "logging"),
    ("/v2/trace/setting", "trace"),
    ("/v2/repository/index", "model-repository"),
    ("/v2/repository/r/models/m/load", "model-repository"),
    ("/v2/repository/models/m/unload", "model-repository"),
    ("/v2/systemsharedmemory/status", "shared-memory"),
    ("/v2/cudasharedmemory/region/r/register", "shared-memory"),
    ("/v2/systemsharedmemory/region/r/unregister", "shared-memory"),
    ("/", "console"),
    ("/console/assets/console.js", "console"),
    ("/console/anything/at/all", "console"),
    ("/v2/nothing", ""),
    (f"/v2/models/{MODEL}/bogus", ""),
    ("", ""),
]


@pytest.mark.parametrize(("path", "category"), CATEGORIES)
def test_each_path_is_of_its_restricted_api_category(path: str, category: str) -> None:
    matched = _ROUTER.match("GET", path)
    assert (matched[0].category if matched is not None else "") == category


@pytest.mark.parametrize(("path", "category"), [(p, c) for p, c in CATEGORIES if c and c != "console"])
def test_a_restricted_category_is_refused_before_the_method_or_body_are_looked_at(
    engine: FakeEngine, path: str, category: str
) -> None:
    restrictions = {c: (f"key-{c}", "yes") for c in RESTRICTABLE}
    routes = HttpRoutes(engine, 1 << 20, restrictions)
    for method in ("GET", "POST", "PUT"):
        request = HttpRequest(method, path, "", {}, b"{bad json", too_large=True)
        refused = asyncio.run(routes(request))
        assert (refused.status, doc(refused)) == (
            403,
            {"error": f"This API is restricted, expecting header 'key-{category}'"},
        )
    allowed = call(routes, "PUT", path, headers={f"key-{category}": "yes"})
    assert allowed.status != 403
    # A category restricted by another header leaves this one alone.
    others = {c: header for c, header in restrictions.items() if c != category}
    assert call(HttpRoutes(engine, 1 << 20, others), "PUT", path).status != 403


def test_an_unknown_path_is_of_no_restricted_category(engine: FakeEngine) -> None:
    routes = HttpRoutes(engine, 1 << 20, {c: ("k", "v") for c in RESTRICTABLE})
    assert call(routes, "GET", "/v2/nothing").status == 404


# -- the infer endpoint ----------------------------------------------------------------------------------------

INFER_BODY = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1.5, 2.5]}]}


def test_a_compressed_body_is_inflated_and_the_answer_compressed_as_asked(
    routes: HttpRoutes, engine: FakeEngine
) -> None:
    body = gzip.compress(orjson.dumps(INFER_BODY))
    headers = {"content-encoding": "gzip", "accept-encoding": "deflate;q=0.5, gzip"}
    answer = call(routes, "POST", f"/v2/models/{MODEL}/infer", body, headers)
    assert answer.status == 200 and ("Content-Encoding", "gzip") in answer.headers
    assert orjson.loads(gzip.decompress(answer.body))["outputs"][0]["data"] == [1.5, 2.5]
    (request,) = engine.requests
    assert request.inputs[0].data.tolist() == [1.5, 2.5]
    unsupported = call(routes, "POST", f"/v2/models/{MODEL}/infer", body, {"content-encoding": "br"})
    assert unsupported.status == 415 and ("Accept-Encoding", "gzip, deflate") in unsupported.headers
    # Only /infer's answers are compressed.
    metadata = call(routes, "GET", f"/v2/models/{MODEL}", headers={"accept-encoding": "gzip"})
    assert ("Content-Encoding", "gzip") not in metadata.headers


def test_a_body_over_the_limit_gets_tritons_message(routes: HttpRoutes) -> None:
    path = f"/v2/models/{MODEL}/infer"
    for headers, what in (({}, "Request JSON size"), ({"inference-header-content-length": "10"}, "Request size")):
        request = HttpRequest("POST", path, "", {"content-length": "2000000", **headers}, b"", too_large=True)
        answer = asyncio.run(routes(request))
        assert (answer.status, doc(answer)) == (
            400,
            {
                "error": f"{what} of 2000000 bytes exceeds the maximum allowed value of 1048576 bytes. "
                "Use --http-max-input-size to increase the limit."
            },
        )
    # Whatever the path or method: the body is refused before the route is looked at.
    unknown = asyncio.run(routes(HttpRequest("PUT", "/v2/nothing", "", {}, b"", too_large=True)))
    assert unknown.status == 400 and "exceeds the maximum allowed value" in doc(unknown)["error"]
    bomb = gzip.compress(b" " * ((1 << 20) + 1))
    inflated = call(routes, "POST", path, bomb, {"content-encoding": "gzip", "content-length": str(len(bomb))})
    assert (inflated.status, doc(inflated)) == (
        400,
        {
            "error": "Request JSON size exceeds the maximum allowed value of 1048576 bytes after decompression. "
            "Use --http-max-input-size to increase the limit."
        },
    )


def test_a_large_body_is_decoded_and_answered(engine: FakeEngine) -> None:
    routes = HttpRoutes(engine, 1 << 26)
    values = np.arange(LARGE_BODY // 4 + 16, dtype=np.float32)  # past LARGE_BODY: decoded off the loop
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "FP32",
                    "shape": [values.size],
                    "parameters": {"binary_data_size": values.nbytes},
                }
            ],
            "parameters": {"binary_data_output": True},
        }
    )
    answer = call(
        routes,
        "POST",
        f"/v2/models/{MODEL}/infer",
        header + values.tobytes(),
        {"inference-header-content-length": str(len(header))},
    )
    assert answer.status == 200, answer.body
    length = int(dict(answer.headers)["Inference-Header-Content-Length"])
    assert np.array_equal(np.frombuffer(answer.body[length:], dtype=np.float32), values)


def test_headers_are_forwarded_as_parameters_where_the_pattern_says(engine: FakeEngine) -> None:
    routes = HttpRoutes(engine, 1 << 20, header_forward_pattern="x-custom")
    headers = {"x-custom-id": "7", "x-other": "no"}
    assert call(routes, "POST", f"/v2/models/{MODEL}/infer", INFER_BODY, headers).status == 200
    (request,) = engine.requests
    assert request.parameters == {"x-custom-id": "7"}
    reserved = call(routes, "POST", f"/v2/models/{MODEL}/infer", INFER_BODY, {"triton_x-custom": "1"})
    assert reserved.status == 400 and "is reserved for Triton usage" in doc(reserved)["error"]
    # Without a pattern nothing is forwarded.
    plain = HttpRoutes(engine, 1 << 20)
    assert call(plain, "POST", f"/v2/models/{MODEL}/infer", INFER_BODY, headers).status == 200
    assert engine.requests[-1].parameters == {}


def test_the_infer_endpoint_adds_the_callers_parameters(routes: HttpRoutes, engine: FakeEngine) -> None:
    request = HttpRequest("POST", "/invocations", "", {}, orjson.dumps(INFER_BODY))
    answer = asyncio.run(routes.infer(request, MODEL, "", {"X-Amzn-SageMaker-Custom-Attributes": "a=1"}))
    assert answer.status == 200
    (core,) = engine.requests
    assert core.parameters == {"X-Amzn-SageMaker-Custom-Attributes": "a=1"}


class _TracingEngine(FakeEngine):
    """Samples every request for tracing, as the engine does when its trace rate says so."""

    async def infer(self, request: InferenceRequest, context: CallContext | None = None) -> InferenceResponse:
        request.trace = object()
        return await super().infer(request, context)


def test_a_traced_request_hands_its_send_span_to_the_engine() -> None:
    engine = _TracingEngine()
    routes = HttpRoutes(engine, 1 << 20)
    assert call(routes, "POST", f"/v2/models/{MODEL}/infer", INFER_BODY).status == 200
    ((model, started, last),) = engine.sent_calls
    assert model == MODEL and started > 0 and last is True
    untraced = FakeEngine()
    assert call(HttpRoutes(untraced, 1 << 20), "POST", f"/v2/models/{MODEL}/infer", INFER_BODY).status == 200
    assert untraced.sent_calls == []
