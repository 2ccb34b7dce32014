"""--http-restricted-api and --grpc-restricted-protocol, through the clients users have: every endpoint of every
category refused without its header (HTTP 403, gRPC UNAVAILABLE, in Triton's words) and served with it, the
SageMaker port included; the flags' mistakes refused at start with tritonserver's messages.

Triton's own tests of the HTTP flag (qa/L0_http/http_restricted_api_test.py) run through scripts/triton_qa.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from e2e.server_process import RunningServer, free_ports, running_server

ALL = "health,metadata,inference,shared-memory,model-config,model-repository,statistics,trace,logging"
KEY, VALUE = "X-Api-Key", "secret"
GRPC_KEY = "triton-grpc-protocol-x-api-key"
HTTP_REFUSAL = {"error": f"This API is restricted, expecting header '{KEY}'"}
GRPC_REFUSAL = f"This protocol is restricted, expecting header '{GRPC_KEY}'"


@pytest.fixture(scope="module")
def server(
    main_repository: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[tuple[RunningServer, str]]:
    log = tmp_path_factory.mktemp("restricted") / "server.log"
    (sagemaker_port,) = free_ports(1)
    with running_server(
        [main_repository],
        log,
        f"--http-restricted-api={ALL}:{KEY}={VALUE}",
        f"--grpc-restricted-protocol={ALL}:x-api-key={VALUE}",
        "--allow-sagemaker=true",
        f"--sagemaker-port={sagemaker_port}",
        "--allow-client-shm=true",
        env={**os.environ, "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "simple"},
        health_headers={KEY: VALUE},
    ) as running:
        yield running, f"http://127.0.0.1:{sagemaker_port}"
    assert "Traceback" not in log.read_text()


def simple_json() -> dict[str, Any]:
    data = list(range(16))
    return {
        "inputs": [
            {"name": name, "shape": [1, 16], "datatype": "INT32", "data": data}
            for name in ("INPUT0", "INPUT1")
        ]
    }


# Every HTTP endpoint, by category: (method, path, body).
HTTP_ENDPOINTS = [
    ("health", "GET", "/v2/health/live", None),
    ("health", "GET", "/v2/health/ready", None),
    ("health", "GET", "/v2/models/simple/ready", None),
    ("metadata", "GET", "/v2", None),
    ("metadata", "GET", "/v2/models/simple", None),
    ("inference", "POST", "/v2/models/simple/infer", simple_json()),
    ("inference", "POST", "/v2/models/simple/versions/1/infer", simple_json()),
    ("inference", "POST", "/v2/models/simple/generate", {"INPUT0": [1], "INPUT1": [1]}),
    ("shared-memory", "GET", "/v2/systemsharedmemory/status", None),
    ("shared-memory", "POST", "/v2/systemsharedmemory/region/r/unregister", None),
    ("shared-memory", "GET", "/v2/cudasharedmemory/status", None),
    ("model-config", "GET", "/v2/models/simple/config", None),
    ("model-repository", "POST", "/v2/repository/index", None),
    ("model-repository", "POST", "/v2/repository/models/simple/load", None),
    ("statistics", "GET", "/v2/models/stats", None),
    ("statistics", "GET", "/v2/models/simple/stats", None),
    ("trace", "GET", "/v2/trace/setting", None),
    ("trace", "GET", "/v2/models/simple/trace/setting", None),
    ("logging", "GET", "/v2/logging", None),
]


@pytest.mark.parametrize(
    ("category", "method", "path", "body"),
    HTTP_ENDPOINTS,
    ids=[f"{c}-{m}-{p}" for c, m, p, _ in HTTP_ENDPOINTS],
)
def test_every_http_endpoint_needs_its_header(
    server: tuple[RunningServer, str], category: str, method: str, path: str, body: Any
) -> None:
    url = f"http://{server[0].http_url}{path}"
    refused = requests.request(method, url, json=body, timeout=30)
    assert refused.status_code == 403 and refused.json() == HTTP_REFUSAL
    wrong = requests.request(method, url, json=body, headers={KEY: "guess"}, timeout=30)
    assert wrong.status_code == 403
    # With the header the request is served (whatever the endpoint then answers, it is not the refusal).
    served = requests.request(method, url, json=body, headers={KEY: VALUE}, timeout=30)
    assert served.status_code != 403, served.text


def test_unknown_paths_and_wrong_methods_are_refused_first(server: tuple[RunningServer, str]) -> None:
    base = f"http://{server[0].http_url}"
    # As Triton: the restriction is checked before the method, so a wrong method is refused too.
    assert requests.post(f"{base}/v2/health/live", timeout=10).status_code == 403
    assert requests.get(f"{base}/v2/nowhere", timeout=10).status_code == 404  # no category: not restricted


def test_tritonclient_http_with_and_without_the_header(server: tuple[RunningServer, str]) -> None:
    client = httpclient.InferenceServerClient(server[0].http_url)
    try:
        with pytest.raises(InferenceServerException, match="This API is restricted"):
            client.get_model_metadata("simple")
        assert client.get_model_metadata("simple", headers={KEY: VALUE})["name"] == "simple"
        inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.ones((1, 16), np.int32))
        with pytest.raises(InferenceServerException, match="This API is restricted"):
            client.infer("simple", inputs)
        out = client.infer("simple", inputs, headers={KEY: VALUE}).as_numpy("OUTPUT0")
        np.testing.assert_array_equal(out, np.full((1, 16), 2, np.int32))
    finally:
        client.close()


GRPC_CALLS = [
    ("ServerLive", service_pb2.ServerLiveRequest()),
    ("ServerReady", service_pb2.ServerReadyRequest()),
    ("ModelReady", service_pb2.ModelReadyRequest(name="simple")),
    ("ServerMetadata", service_pb2.ServerMetadataRequest()),
    ("ModelMetadata", service_pb2.ModelMetadataRequest(name="simple")),
    ("ModelConfig", service_pb2.ModelConfigRequest(name="simple")),
    ("ModelStatistics", service_pb2.ModelStatisticsRequest(name="simple")),
    ("TraceSetting", service_pb2.TraceSettingRequest()),
    ("LogSettings", service_pb2.LogSettingsRequest()),
    ("RepositoryIndex", service_pb2.RepositoryIndexRequest()),
    ("RepositoryModelLoad", service_pb2.RepositoryModelLoadRequest(model_name="simple")),
    ("RepositoryModelUnload", service_pb2.RepositoryModelUnloadRequest(model_name="nothing")),
    ("ModelInfer", service_pb2.ModelInferRequest(model_name="simple")),
    ("SystemSharedMemoryStatus", service_pb2.SystemSharedMemoryStatusRequest()),
    ("SystemSharedMemoryRegister", service_pb2.SystemSharedMemoryRegisterRequest(name="r", key="/nothing")),
    ("SystemSharedMemoryUnregister", service_pb2.SystemSharedMemoryUnregisterRequest(name="r")),
    ("CudaSharedMemoryStatus", service_pb2.CudaSharedMemoryStatusRequest()),
    ("CudaSharedMemoryRegister", service_pb2.CudaSharedMemoryRegisterRequest(name="r")),
    ("CudaSharedMemoryUnregister", service_pb2.CudaSharedMemoryUnregisterRequest(name="r")),
]


@pytest.fixture(scope="module")
def stub(server: tuple[RunningServer, str]) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    with grpc.insecure_channel(server[0].grpc_url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def test_every_rpc_is_restricted(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    assert {name for name, _ in GRPC_CALLS} | {"ModelStreamInfer"} == set(
        service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods_by_name
    )


@pytest.mark.parametrize(("rpc", "request_message"), GRPC_CALLS, ids=[name for name, _ in GRPC_CALLS])
def test_every_rpc_needs_its_metadata(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, rpc: str, request_message: Any
) -> None:
    call = getattr(stub, rpc)
    with pytest.raises(grpc.RpcError) as refused:
        call(request_message, timeout=30)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert refused.value.details() == GRPC_REFUSAL
    try:
        call(request_message, timeout=30, metadata=((GRPC_KEY, VALUE),))
    except grpc.RpcError as served:  # whatever the call then answers, it is not the refusal
        assert served.details() != GRPC_REFUSAL


def test_a_stream_needs_its_metadata_and_health_checks_do_not(
    server: tuple[RunningServer, str], stub: service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    request = service_pb2.ModelInferRequest(model_name="simple")
    with pytest.raises(grpc.RpcError) as refused:
        list(stub.ModelStreamInfer(iter([request]), timeout=30))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE and refused.value.details() == GRPC_REFUSAL
    answers = list(stub.ModelStreamInfer(iter([request]), timeout=30, metadata=((GRPC_KEY, VALUE),)))
    assert len(answers) == 1 and answers[0].error_message  # served: a bad request, answered in the stream
    with grpc.insecure_channel(server[0].grpc_url) as channel:  # Kubernetes' probes carry no header
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=30)
    assert health.status == health_pb2.HealthCheckResponse.SERVING


def test_tritonclient_grpc_with_and_without_the_metadata(server: tuple[RunningServer, str]) -> None:
    client = grpcclient.InferenceServerClient(server[0].grpc_url)
    try:
        with pytest.raises(InferenceServerException, match="This protocol is restricted"):
            client.is_server_live()
        assert client.is_server_live(headers={GRPC_KEY: VALUE})
    finally:
        client.close()


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/ping", None),
        ("POST", "/invocations", simple_json()),
        ("GET", "/models", None),
        ("GET", "/models/m", None),
        ("POST", "/models", {"model_name": "m", "url": "/nowhere"}),
        ("DELETE", "/models/m", None),
        ("POST", "/models/m/invoke", simple_json()),
    ],
)
def test_sagemaker_routes_are_restricted_too(
    server: tuple[RunningServer, str], method: str, path: str, body: Any
) -> None:
    url = f"{server[1]}{path}"
    refused = requests.request(method, url, json=body, timeout=30)
    assert refused.status_code == 403 and refused.json() == HTTP_REFUSAL
    served = requests.request(method, url, json=body, headers={KEY: VALUE}, timeout=30)
    assert served.status_code != 403, served.text
