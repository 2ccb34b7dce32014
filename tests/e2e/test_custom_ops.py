"""`model_operations { op_library_filename }` with a real custom operation library (the one onnxruntime-extensions
ships): an ONNX model using one of its operations serves once the library is named, auto-complete included; without
it, with a library that does not load, or on a backend that does not load libraries, that model fails its load
with the reason and the others keep serving."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper

from e2e.models import copy_examples, write_config
from e2e.server_process import RunningServer, running_server

extensions = pytest.importorskip("onnxruntime_extensions")


def _inverse_model(path: Path) -> None:
    """Y = X⁻¹ through `ai.onnx.contrib:Inverse`, an operation of onnxruntime-extensions' library."""
    node = helper.make_node("Inverse", ["X"], ["Y"], domain="ai.onnx.contrib")
    graph = helper.make_graph(
        [node],
        "inverse",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 2])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.contrib", 1)]
    )
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


IO = """
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2, 2 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2, 2 ] } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("repo")
    library = extensions.get_library_path()
    ops = f'model_operations {{ op_library_filename: "{library}" }}'
    for name, config in {
        "inverse": f'backend: "onnxruntime"\n{IO}\n{ops}',
        "inverse_auto": f'backend: "onnxruntime"\n{ops}',  # inputs and outputs read from the model
        "inverse_without_library": f'backend: "onnxruntime"\n{IO}',
        "inverse_missing_library": f'backend: "onnxruntime"\n{IO}\nmodel_operations {{ op_library_filename: '
        f'"{repo}/libnot_there.so" }}',
    }.items():
        _inverse_model(repo / name / "1" / "model.onnx")
        write_config(repo / name, config)
    write_config(repo / "python_with_ops", f'backend: "python"\n{IO}\n{ops}')
    (repo / "python_with_ops" / "1").mkdir()
    (repo / "python_with_ops" / "1" / "model.py").write_text("class TritonPythonModel:\n    pass\n")
    copy_examples(repo, "simple")
    log = tmp_path_factory.mktemp("logs") / "server.log"
    with running_server([repo], log, "--exit-on-error=false", "--model-control-mode=explicit",
                        "--load-model=*", wait_ready=False) as running:  # fmt: skip
        yield running


X = np.array([[4, 7], [2, 6]], dtype=np.float32)


@pytest.mark.parametrize("name", ["inverse", "inverse_auto"])
def test_a_model_with_custom_operations_serves_with_their_library(server: RunningServer, name: str) -> None:
    for module, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
        client = module.InferenceServerClient(url)
        try:
            tensor = module.InferInput("X", [2, 2], "FP32")
            tensor.set_data_from_numpy(X)
            np.testing.assert_allclose(
                client.infer(name, [tensor]).as_numpy("Y"), np.linalg.inv(X), rtol=1e-5
            )
        finally:
            client.close()


def test_each_model_that_cannot_have_its_operations_fails_alone(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        index = {row["name"]: row for row in client.get_model_repository_index()}
        reasons = {
            "inverse_without_library": "ai.onnx.contrib:Inverse(-1) is not a registered function/op",
            "inverse_missing_library": "the custom operation library",
            "python_with_ops": "is honoured by the onnxruntime backend only, not by 'python'",
        }
        for name, reason in reasons.items():
            assert index[name]["state"] == "UNAVAILABLE", index[name]
            assert reason in index[name]["reason"], index[name]
        assert "libnot_there.so" in index["inverse_missing_library"]["reason"]
        assert client.is_model_ready("simple") and client.is_model_ready("inverse")
    finally:
        client.close()
