"""The Vertex AI endpoint, as a Vertex AI prediction container is run: AIP_* variables, the predict and health
routes, the redirect header to the KServe v2 endpoints that read, binary tensors in Vertex AI's media type, and
the startup errors of a container set up wrong. Through requests, as Vertex AI's own HTTP calls reach it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests

from e2e import server_process
from e2e.models import copy_examples
from e2e.server_process import free_ports, running_server

PREDICT = "/v1/endpoints/123/deployedModels/456:predict"
HEALTH = "/v1/endpoints/123/deployedModels/456"
BINARY = "application/vnd.vertex-ai-triton.binary+json;json-header-size="
INFER_BODY = {
    "inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16},
    ]
}


def _environment(repo: Path, port: int, **more: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "AIP_MODE": "PREDICTION",
        "AIP_HTTP_PORT": str(port),
        "AIP_PREDICT_ROUTE": PREDICT,
        "AIP_HEALTH_ROUTE": HEALTH,
        "AIP_STORAGE_URI": str(repo),
        **more,
    }


def _command(*flags: str) -> list[str]:
    _, grpc_port, metrics_port = free_ports(3)
    return [sys.executable, "-m", "modelhost", "serve", f"--metrics-port={metrics_port}",
            f"--grpc-port={grpc_port}", f"--frontend-processes={server_process.frontend_processes}",
            *flags]  # fmt: skip


@pytest.fixture(scope="module")
def vertex(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Iterator[str]:
    """A Vertex AI container: no flag but the ports, the repository from AIP_STORAGE_URI; its base URL."""
    repo = tmp_path_factory.mktemp("models")
    copy_examples(repo, "simple")
    (port,) = free_ports(1)
    log = tmp_path_factory.mktemp("logs") / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            _command(), env=_environment(repo, port), stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log.read_text()
            try:
                if requests.get(url + HEALTH, timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        assert process.wait(60) == 0, log.read_text()


def _check_simple(answer: requests.Response) -> None:
    assert answer.status_code == 200, answer.text
    outputs = {o["name"]: o["data"] for o in answer.json()["outputs"]}
    assert outputs["OUTPUT0"] == [i + 1 for i in range(16)]
    assert outputs["OUTPUT1"] == [i - 1 for i in range(16)]


def test_predict_route_infers_the_only_model(vertex: str) -> None:
    _check_simple(requests.post(vertex + PREDICT, json=INFER_BODY, timeout=30))


def test_binary_tensors_in_vertex_ais_media_type(vertex: str) -> None:
    header = {
        "inputs": [
            {"name": n, "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}}
            for n in ("INPUT0", "INPUT1")
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }
    head = json.dumps(header).encode()
    a = np.arange(16, dtype=np.int32)
    body = head + a.tobytes() + np.ones(16, dtype=np.int32).tobytes()
    answer = requests.post(
        vertex + PREDICT, data=body, headers={"Content-Type": BINARY + str(len(head))}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    size = int(answer.headers["Inference-Header-Content-Length"])
    np.testing.assert_array_equal(np.frombuffer(answer.content[size:], dtype=np.int32), a + 1)


def test_health_route_and_bad_routes(vertex: str) -> None:
    assert requests.get(vertex + HEALTH, timeout=10).status_code == 200
    other = requests.get(vertex + "/v2/health/ready", timeout=10)  # the HTTP API's paths are not served
    assert other.status_code == 400 and "neither the predict nor the health route" in other.json()["error"]


@pytest.mark.parametrize(
    ("endpoint", "status", "expect"),
    [
        ("v2", 200, '"name":"triton"'),
        ("v2/health/live", 200, ""),
        ("v2/models/simple", 200, '"platform":"onnxruntime_onnx"'),
        ("v2/models/simple/ready", 200, ""),
        ("v2/models/simple/config", 200, '"max_batch_size":8'),
        ("v2/models/simple/stats", 200, '"model_stats"'),
        ("v2/models/stats", 200, '"model_stats"'),
        ("metrics", 200, 'nv_inference_request_success{model="simple",version="1"}'),
        ("v2/repository/index", 200, '"state":"READY"'),
        ("v2/systemsharedmemory/status", 200, ""),
        ("v2/repository/models/simple/unload", 403, "is not served through Vertex AI's redirect"),
        ("v2/systemsharedmemory/region/r/register", 403, "is not served through Vertex AI's redirect"),
        ("v2/models/simple/generate", 400, "is not an endpoint Vertex AI's redirect serves"),
        ("v2/logging", 400, "is not an endpoint Vertex AI's redirect serves"),
    ],
)
def test_redirect_serves_the_endpoints_that_read(
    vertex: str, endpoint: str, status: int, expect: str
) -> None:
    answer = requests.post(
        vertex + PREDICT, headers={"X-Vertex-Ai-Triton-Redirect": endpoint}, data=b"", timeout=30
    )
    assert answer.status_code == status, answer.text
    assert expect in (answer.text if status != 200 else answer.text.replace(" ", "")), answer.text


def test_redirected_inference_and_its_errors(vertex: str) -> None:
    redirect = {"X-Vertex-Ai-Triton-Redirect": "v2/models/simple/infer"}
    _check_simple(requests.post(vertex + PREDICT, json=INFER_BODY, headers=redirect, timeout=30))
    # Only POST carries a redirect; a bad body is the client's error; the endpoint goes on serving.
    assert requests.get(vertex + PREDICT, headers=redirect, timeout=10).status_code == 405
    bad = requests.post(vertex + PREDICT, data=b"{not json", headers=redirect, timeout=10)
    assert bad.status_code == 400 and "error" in bad.json()
    unknown = requests.post(
        vertex + PREDICT,
        json=INFER_BODY,
        headers={"X-Vertex-Ai-Triton-Redirect": "v2/models/nope/infer"},
        timeout=30,
    )
    assert unknown.status_code in (400, 404), unknown.text
    _check_simple(requests.post(vertex + PREDICT, json=INFER_BODY, timeout=30))


def test_beside_the_http_and_grpc_ports(tmp_path: Path) -> None:
    """Asked for alongside the other ports (and their frontend processes), with a default model named."""
    repo = tmp_path / "models"
    copy_examples(repo, "simple", "identity_fp32")
    (port,) = free_ports(1)
    env = {k: v for k, v in _environment(repo, port).items() if k not in ("AIP_MODE", "AIP_STORAGE_URI")}
    with running_server([repo], tmp_path / "server.log", "--allow-vertex-ai=true",
                        "--vertex-ai-default-model=simple", env=env) as server:  # fmt: skip
        _check_simple(requests.post(f"http://127.0.0.1:{port}{PREDICT}", json=INFER_BODY, timeout=30))
        _check_simple(requests.post(f"http://{server.http_url}/v2/models/simple/infer", json=INFER_BODY))


@pytest.mark.parametrize(
    ("change", "flags", "message"),
    [
        ({"AIP_PREDICT_ROUTE": ""}, (), "AIP_PREDICT_ROUTE is not defined for Vertex AI endpoint"),
        ({"AIP_HEALTH_ROUTE": ""}, (), "AIP_HEALTH_ROUTE is not defined for Vertex AI endpoint"),
        ({}, ("--vertex-ai-default-model=nope",), "Expect the default model 'nope' is loaded"),
        (
            {"TWO_MODELS": "1"},
            (),
            "Expect the model repository contains only a single model if default model is not specified",
        ),
        ({"AIP_HTTP_PORT": "eighty"}, (), "AIP_HTTP_PORT must be an integer, got 'eighty'"),
    ],
)
def test_a_container_set_up_wrong_stops_with_the_reason(
    change: dict[str, str], flags: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    repo = tmp_path / "models"
    copy_examples(repo, "simple", *(("identity_fp32",) if "TWO_MODELS" in change else ()))
    (port,) = free_ports(1)
    env = _environment(repo, port, **{k: v for k, v in change.items() if k != "TWO_MODELS"})
    result = subprocess.run(
        _command(*flags), env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode in (1, 2), result.stdout + result.stderr
    assert message in result.stdout + result.stderr
