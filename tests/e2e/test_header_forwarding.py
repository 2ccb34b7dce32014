"""--http-header-forward-pattern and --grpc-header-forward-pattern: matching headers (metadata) reach the model as
string request parameters, over HTTP /infer, gRPC ModelInfer and ModelStreamInfer, in every
--frontend-processes mode; a reserved name fails only its request."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from e2e.models import write_config
from e2e.server_process import RunningServer, running_server

# Echoes the request's parameters (JSON) in PARAMS.
MODEL = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            params = np.array([request.parameters().encode()], dtype=np.object_)
            answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("PARAMS", params)]))
        return answers
"""
CONFIG = """
name: "echo_params"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
# Upper case: the pattern matches case-insensitively, as Triton's does. `triton_` names are reserved.
PATTERN = "^(X-FWD-|TRITON_)"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("repo")
    write_config(repo / "echo_params", CONFIG)
    (repo / "echo_params" / "1").mkdir()
    (repo / "echo_params" / "1" / "model.py").write_text(MODEL)
    log = tmp_path_factory.mktemp("logs") / "server.log"
    patterns = (f"--http-header-forward-pattern={PATTERN}", f"--grpc-header-forward-pattern={PATTERN}")
    with running_server([repo], log, *patterns) as running:
        yield running


def _inputs(module: Any) -> list[Any]:
    tensor = module.InferInput("INPUT0", [2], "FP32")
    tensor.set_data_from_numpy(np.ones(2, dtype=np.float32))
    return [tensor]


def _params(result: Any) -> dict[str, object]:
    return dict(json.loads(result.as_numpy("PARAMS")[0]))


def test_http_headers_that_match_become_string_parameters(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        result = client.infer(
            "echo_params",
            _inputs(httpclient),
            headers={"X-Fwd-Tenant": "acme", "x-fwd-count": "3", "X-Other": "kept back"},
            parameters={"from_body": 1},
        )
    finally:
        client.close()
    params = _params(result)
    assert params["x-fwd-tenant"] == "acme"
    assert params["x-fwd-count"] == "3"  # a string, whatever it looks like
    assert params["from_body"] == 1
    assert not any("other" in key for key in params), params


def test_grpc_metadata_that_matches_becomes_string_parameters(server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        result = client.infer(
            "echo_params", _inputs(grpcclient), headers={"x-fwd-tenant": "acme", "x-other": "kept back"}
        )
    finally:
        client.close()
    params = _params(result)
    assert params["x-fwd-tenant"] == "acme"
    assert "x-other" not in params


def test_a_streams_metadata_reaches_each_of_its_requests(server: RunningServer) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        client.start_stream(lambda result, error: answers.put(error or result), headers={"x-fwd-user": "ann"})
        for _ in range(2):
            client.async_stream_infer("echo_params", _inputs(grpcclient))
        results = [answers.get(timeout=30) for _ in range(2)]
        client.stop_stream()
    finally:
        client.close()
    for result in results:
        assert not isinstance(result, Exception), result
        assert _params(result)["x-fwd-user"] == "ann"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_reserved_name_fails_its_request_and_the_server_goes_on(
    server: RunningServer, protocol: str
) -> None:
    module: Any = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    client = module.InferenceServerClient(url)
    try:
        with pytest.raises(InferenceServerException) as failed:
            client.infer("echo_params", _inputs(module), headers={"triton_tag": "x"})
        assert "Header 'triton_tag' is reserved for Triton usage and cannot be forwarded." in str(
            failed.value
        )
        status = failed.value.status()
        assert status in ("400", "StatusCode.INVALID_ARGUMENT"), status
        assert (
            _params(client.infer("echo_params", _inputs(module), headers={"x-fwd-a": "b"}))["x-fwd-a"] == "b"
        )
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_pattern_that_is_not_a_regular_expression_stops_the_command(protocol: str, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "modelhost", "serve", f"--model-repository={tmp_path}",
               f"--{protocol}-header-forward-pattern=x-(unclosed"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert f"--{protocol}-header-forward-pattern is not a valid regular expression" in result.stderr
    assert "x-(unclosed" in result.stderr
