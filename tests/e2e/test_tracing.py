"""Tracing end to end: Triton's trace files, the trace settings API over HTTP and gRPC, and OpenTelemetry spans
sent to a collector the test runs on loopback. Expected shapes and words are the reference tritonserver's (2.51)."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from e2e.clients import failure
from e2e.models import add_identity
from e2e.server_process import RunningServer, running_server

HTTP_STAMPS = [
    "HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START", "INFER_RESPONSE_COMPLETE", "COMPUTE_END", "REQUEST_END", "HTTP_SEND_START",
    "HTTP_SEND_END",
]  # fmt: skip
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _inputs(module: Any, value: float = 1.0) -> list[Any]:
    tensor = module.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), value, dtype=np.float32))
    return [tensor]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Path:
    root = tmp_path_factory.mktemp("trace_repo")
    add_identity(root, "identity", "FP32", dims="[ 4 ]")
    add_identity(root, "other", "FP32", dims="[ 4 ]")
    (root / "pair" / "1").mkdir(parents=True)
    (root / "pair" / "config.pbtxt").write_text(
        'platform: "ensemble" max_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        "ensemble_scheduling { step [\n"
        '  { model_name: "identity" model_version: -1 input_map { key: "INPUT0" value: "INPUT0" }'
        ' output_map { key: "OUTPUT0" value: "mid" } },\n'
        '  { model_name: "other" model_version: -1 input_map { key: "INPUT0" value: "mid" }'
        ' output_map { key: "OUTPUT0" value: "OUTPUT0" } } ] }\n'
    )
    # A python model whose BLS call to `identity` carries its request's trace (Triton's way to trace BLS).
    (root / "bls_caller" / "1").mkdir(parents=True)
    (root / "bls_caller" / "config.pbtxt").write_text(
        'backend: "python" max_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )
    (root / "bls_caller" / "1" / "model.py").write_text(BLS_CALLER)
    return root


BLS_CALLER = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            request.trace().report_activity("PREPARE_START")
            request.trace().report_activity("PREPARE_END")
            call = pb_utils.InferenceRequest(
                model_name="identity",
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0")],
                requested_output_names=["OUTPUT0"],
                trace=request.trace(),
            )
            answer = call.exec()
            out = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out.as_numpy())]))
        return responses
"""


class TraceFileServer:
    def __init__(self, server: RunningServer, trace_file: Path) -> None:
        self.server = server
        self.trace_file = trace_file

    def settings_url(self, model: str = "") -> str:
        return f"http://{self.server.http_url}/v2{f'/models/{model}' if model else ''}/trace/setting"


@pytest.fixture(scope="module")
def traced(
    repo: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[TraceFileServer]:
    trace_file = tmp_path_factory.mktemp("traces") / "trace.json"
    log = tmp_path_factory.mktemp("log") / "server.log"
    flags = [
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1",
        f"--trace-config=triton,file={trace_file}",
    ]
    with running_server([repo], log, *flags) as server:
        yield TraceFileServer(server, trace_file)


def test_settings_from_the_flags(traced: TraceFileServer) -> None:
    assert requests.get(traced.settings_url(), timeout=10).json() == {
        "trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "-1", "log_frequency": "0",
        "trace_file": str(traced.trace_file), "trace_mode": "triton",
    }  # fmt: skip
    assert requests.get(traced.settings_url("identity"), timeout=10).json()["trace_rate"] == "1"
    assert "trace" in requests.get(f"http://{traced.server.http_url}/v2", timeout=10).json()["extensions"]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"trace_rate": "abc"}, 400, "Unable to parse 'trace_rate', got: abc"),
        ({"trace_rate": "0"}, 400, "Attempting to set invalid trace setting :sample rate must be non-zero"),
        ({"trace_count": "-5"}, 400, "Unable to parse 'trace_count'. Expecting value >= -1, got: -5"),
        ({"trace_level": ["OFF", "TIMESTAMPS"]}, 400, "Expect only one trace level 'OFF' is specified"),
        (
            {"trace_file": "/tmp/elsewhere.json"},
            501,
            "trace file location can not be updated through network protocol",
        ),
        # Triton answers these 200 and ignores them, or 500: modelhost says what is wrong.
        ({"trace_level": ["BOGUS"]}, 400, "invalid trace level 'BOGUS'"),
        ({"trace_rate": 5}, 400, "trace setting 'trace_rate' must be a string"),
        ({"unknown_key": "1"}, 400, "unknown trace setting 'unknown_key'"),
    ],
)
def test_bad_settings_are_refused_and_change_nothing(
    traced: TraceFileServer, body: dict[str, Any], status: int, message: str
) -> None:
    before = requests.get(traced.settings_url(), timeout=10).json()
    response = requests.post(traced.settings_url(), json=body, timeout=10)
    assert response.status_code == status
    assert message in response.json()["error"]
    assert requests.get(traced.settings_url(), timeout=10).json() == before


def test_unknown_models_and_versions(traced: TraceFileServer) -> None:
    response = requests.get(traced.settings_url("nosuch"), timeout=10)
    assert (response.status_code, response.json()) == (400, {"error": "Request for unknown model : nosuch"})
    url = f"http://{traced.server.http_url}/v2/models/identity/versions/1/trace/setting"
    assert requests.get(url, timeout=10).status_code == 400


def test_a_model_setting_overrides_one_field_and_null_goes_back(traced: TraceFileServer) -> None:
    assert (
        requests.post(traced.settings_url("other"), json={"trace_rate": "3"}, timeout=10).json()["trace_rate"]
        == "3"
    )
    assert requests.get(traced.settings_url(), timeout=10).json()["trace_rate"] == "1"
    back = requests.post(traced.settings_url("other"), json={"trace_rate": None}, timeout=10).json()
    assert back["trace_rate"] == "1"


def test_grpc_trace_settings(traced: TraceFileServer) -> None:
    client = grpcclient.InferenceServerClient(traced.server.grpc_url)
    try:
        settings = client.get_trace_settings(as_json=True)["settings"]
        assert settings["trace_level"]["value"] == ["TIMESTAMPS"]
        updated = client.update_trace_settings("other", {"trace_count": "7"}, as_json=True)["settings"]
        assert updated["trace_count"]["value"] == ["7"]
        with pytest.raises(Exception) as caught:
            client.update_trace_settings(settings={"trace_rate": "abc"})
        assert "Unable to parse 'trace_rate', got: abc" in str(caught.value)
        error = failure(lambda: client.update_trace_settings(settings={"trace_file": "/tmp/x"}))
        assert error.status() == str(grpc.StatusCode.UNIMPLEMENTED)
        client.update_trace_settings("other", {"trace_count": None})
    finally:
        client.close()


def test_trace_file_written_at_shutdown(traced: TraceFileServer) -> None:
    http = httpclient.InferenceServerClient(traced.server.http_url)
    http.infer("identity", _inputs(httpclient), request_id="r1", headers={"traceparent": TRACEPARENT})
    http.close()
    http = httpclient.InferenceServerClient(traced.server.http_url)
    http.infer("pair", _inputs(httpclient), request_id="e1")
    http.infer("bls_caller", _inputs(httpclient, 3.0), request_id="b1")
    http.close()
    grpc_client = grpcclient.InferenceServerClient(traced.server.grpc_url)
    grpc_client.infer("identity", _inputs(grpcclient), request_id="g1")
    done: list[Any] = []
    grpc_client.start_stream(callback=lambda result, error: done.append((result, error)))
    grpc_client.async_stream_infer("identity", _inputs(grpcclient), request_id="s1")
    grpc_client.stop_stream()  # waits for the answer
    assert len(done) == 1 and done[0][1] is None
    grpc_client.close()
    assert not traced.trace_file.exists()  # log-frequency 0: written when the server stops
    assert traced.server.stop() == 0
    objects = json.loads(traced.trace_file.read_text())
    by_id: dict[int, list[dict[str, Any]]] = {}
    for item in objects:
        by_id.setdefault(item["id"], []).append(item)
    infos = [items[0] for items in by_id.values()]
    assert {"id": infos[0]["id"], "model_name": "identity", "model_version": 1, "request_id": "r1"} in infos
    http_trace = next(items for items in by_id.values() if items[0].get("request_id") == "r1")
    stamps = [item["timestamps"][0] for item in http_trace[1:]]
    assert [s["name"] for s in stamps] == HTTP_STAMPS
    assert all(len(item["timestamps"]) == 1 for item in http_trace[1:])
    times = {s["name"]: s["ns"] for s in stamps}
    assert (
        times["HTTP_RECV_START"] <= times["REQUEST_START"] <= times["REQUEST_END"] <= times["HTTP_SEND_END"]
    )
    for request_id in ("g1", "s1"):  # unary and streamed
        grpc_trace = next(items for items in by_id.values() if items[0].get("request_id") == request_id)
        names = [item["timestamps"][0]["name"] for item in grpc_trace[1:]]
        assert names[0] == "GRPC_WAITREAD_START" and names[-1] == "GRPC_SEND_END"
    # An ensemble's steps are traced as children of its trace.
    ensemble = next(items[0] for items in by_id.values() if items[0].get("model_name") == "pair")
    children = [items[0] for items in by_id.values() if items[0].get("parent_id") == ensemble["id"]]
    assert sorted(c["model_name"] for c in children) == ["identity", "other"]
    assert all(c["request_id"] == "e1" for c in children)
    # A python model's BLS request made with `trace=request.trace()` is traced as a child of its request.
    caller = next(items for items in by_id.values() if items[0].get("model_name") == "bls_caller")
    (bls,) = [items for items in by_id.values() if items[0].get("parent_id") == caller[0]["id"]]
    assert bls[0]["model_name"] == "identity" and bls[0]["request_id"] == "b1"
    bls_times = {item["timestamps"][0]["name"]: item["timestamps"][0]["ns"] for item in bls[1:]}
    caller_times = {item["timestamps"][0]["name"]: item["timestamps"][0]["ns"] for item in caller[1:]}
    assert caller_times["COMPUTE_START"] <= bls_times["REQUEST_START"] <= bls_times["REQUEST_END"]
    assert bls_times["REQUEST_END"] <= caller_times["COMPUTE_END"]  # within its caller's execution
    # The custom activities the model recorded, in its trace, within its execution.
    assert caller_times["COMPUTE_START"] <= caller_times["PREPARE_START"] <= caller_times["PREPARE_END"]
    assert caller_times["PREPARE_END"] <= bls_times["REQUEST_START"]


# --- OpenTelemetry, to a collector on loopback


class _Collector(http.server.BaseHTTPRequestHandler):
    spans: list[Any] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            for scope in resource_spans.scope_spans:
                type(self).spans.extend(scope.spans)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def collector(frontend_processes: int) -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Collector.spans.clear()  # the spans of the module's run in the other frontend mode
    yield f"127.0.0.1:{httpd.server_address[1]}/v1/traces"
    httpd.shutdown()
    httpd.server_close()


def test_opentelemetry_spans_reach_the_collector_as_children_of_the_caller(
    repo: Path, collector: str, tmp_path: Path
) -> None:
    flags = [
        "--trace-config=mode=opentelemetry",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1",
        f"--trace-config=opentelemetry,url={collector}",
        "--trace-config=opentelemetry,bsp_schedule_delay=50",
    ]
    with running_server([repo], tmp_path / "server.log", *flags) as server:
        settings = requests.get(f"http://{server.http_url}/v2/trace/setting", timeout=10).json()
        assert settings["trace_mode"] == "opentelemetry" and settings["url"] == collector
        assert "trace_file" not in settings
        http = httpclient.InferenceServerClient(server.http_url)
        http.infer("identity", _inputs(httpclient), headers={"traceparent": TRACEPARENT})
        http.close()
        assert server.stop() == 0  # flushes the batch
    # Triton's spans: InferRequest (the frontend's events) > the model's (the request's) > compute.
    spans = {span.name: span for span in _Collector.spans}
    assert sorted(spans) == ["InferRequest", "compute", "identity"]
    root, model, compute = spans["InferRequest"], spans["identity"], spans["compute"]
    assert root.trace_id.hex() == "0af7651916cd43dd8448eb211c80319c"
    assert root.parent_span_id.hex() == "b7ad6b7169203331"
    assert (model.parent_span_id, compute.parent_span_id) == (root.span_id, model.span_id)
    assert [e.name for e in root.events] == [
        n for n in HTTP_STAMPS if n.startswith("HTTP_") or n == "INFER_RESPONSE_COMPLETE"
    ]
    assert [e.name for e in model.events] == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    assert [e.name for e in compute.events] == [n for n in HTTP_STAMPS if n.startswith("COMPUTE_")]
    attributes = {a.key: a.value.string_value for a in model.attributes}
    assert attributes["triton.model_name"] == "identity"


def test_opentelemetry_custom_activities_and_bls_calls_are_spans_under_the_model(
    repo: Path, collector: str, tmp_path: Path
) -> None:
    flags = [
        "--trace-config=mode=opentelemetry",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1",
        f"--trace-config=opentelemetry,url={collector}",
        "--trace-config=opentelemetry,bsp_schedule_delay=50",
    ]
    _Collector.spans.clear()
    with running_server([repo], tmp_path / "server.log", *flags) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        http.infer("bls_caller", _inputs(httpclient), headers={"traceparent": TRACEPARENT})
        http.close()
        assert server.stop() == 0  # flushes the batch
    spans = {span.name: span for span in _Collector.spans}
    caller = spans["bls_caller"]
    # The model's PREPARE_START / PREPARE_END make a span PREPARE; its BLS call is the called model's span.
    assert spans["PREPARE"].parent_span_id == caller.span_id
    assert spans["identity"].parent_span_id == caller.span_id
    assert spans["PREPARE"].end_time_unix_nano <= spans["identity"].start_time_unix_nano
    assert all(span.trace_id.hex() == "0af7651916cd43dd8448eb211c80319c" for span in _Collector.spans)
