"""ONNX models' tensors at the edges of what Triton's ONNX Runtime backend serves, through tritonclient:
scalar inputs and outputs (rank 0 in the model, all 1s in the config: Triton's L0_scalar_io), and STRING bytes
that are not UTF-8 (passed through unchanged, as Triton hands them to ONNX Runtime)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper

from e2e import server_process
from e2e.models import add_identity, save, write_config
from e2e.server_process import LOAD_ALL_EXPLICITLY, RunningServer, running_server


def add_scalar_identity(repo: Path, name: str, dims: str) -> None:
    """Triton's gen_qa_ort_scalar_models.py: an identity whose input and output have no shape in the model."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT"], ["OUTPUT"])],
        name,
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, None)],
    )
    save(graph, repo / name / "1" / "model.onnx")
    write_config(
        repo / name,
        f"""
platform: "onnxruntime_onnx"
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: {dims} }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: {dims} }} ]
""",
    )


@pytest.fixture(scope="module", autouse=True)
def frontend_processes() -> Iterator[int]:
    """The backend does not depend on the frontend mode: one server, single process."""
    server_process.frontend_processes = 0
    yield 0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("repo")
    add_scalar_identity(repo, "onnx_scalar_1dim", "[ 1 ]")
    add_scalar_identity(repo, "onnx_scalar_2dim", "[ 1, 1 ]")
    add_scalar_identity(repo, "onnx_scalar_bad", "[ 2 ]")
    add_identity(repo, "identity_bytes", "BYTES")
    log = tmp_path_factory.mktemp("log") / "server.log"
    with running_server([repo], log, *LOAD_ALL_EXPLICITLY) as running:
        yield running


@pytest.mark.parametrize(("model", "shape"), [("onnx_scalar_1dim", [1]), ("onnx_scalar_2dim", [1, 1])])
def test_scalar_inputs_and_outputs(server: RunningServer, model: str, shape: list[int]) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    value = np.full(shape, 1.5, dtype=np.float32)
    tensor = grpcclient.InferInput("INPUT", shape, "FP32")
    tensor.set_data_from_numpy(value)
    np.testing.assert_array_equal(client.infer(model, [tensor]).as_numpy("OUTPUT"), value)


def test_a_scalar_with_a_dimension_other_than_1_fails_its_load(server: RunningServer) -> None:
    request = urllib.request.Request(f"http://{server.http_url}/v2/repository/index", data=b"{}")
    with urllib.request.urlopen(request, timeout=10) as response:
        index: list[dict[str, Any]] = json.loads(response.read())
    [bad] = [m for m in index if m["name"] == "onnx_scalar_bad"]
    assert bad["state"] == "UNAVAILABLE"
    assert (
        "unable to load model 'onnx_scalar_bad', scalar tensor 'INPUT', should only provide 1 in the model "
        "configuration when the model doesn't support batching. Model configuration provided: [2]."
    ) in bad["reason"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_string_bytes_that_are_not_utf8_pass_through(server: RunningServer, protocol: str) -> None:
    module: Any = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    values = np.array([[b"\xff\xfe\x00raw", b"caf\xc3\xa9", b"\x80"]], dtype=np.object_)
    tensor = module.InferInput("INPUT0", [1, 3], "BYTES")
    tensor.set_data_from_numpy(values)
    np.testing.assert_array_equal(client.infer("identity_bytes", [tensor]).as_numpy("OUTPUT0"), values)
