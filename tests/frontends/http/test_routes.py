"""The HTTP routes against a fake engine, in process: what each endpoint asks of the EngineAPI and how it answers
(statuses, bodies, Triton's messages), without a server process."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import orjson
import pytest

from fake_engine import DECOUPLED, MODEL, FakeEngine
from modelhost.frontends.http.messages import HttpRequest, HttpResponse
from modelhost.frontends.http.routes import HttpRoutes
from modelhost.types import ShmWindow


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
