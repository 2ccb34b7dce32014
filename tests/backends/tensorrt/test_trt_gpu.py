"""The TensorRT backend on a GPU (marked `gpu`; needs `pip install 'modelhost[tensorrt]'` there too): a plan built
from a small ONNX model with modelhost's converter (`--write-config` into a Triton layout), served by the real
server, and tritonclient's answers (HTTP and gRPC) checked against onnxruntime's on the same model, plus a batch
outside the profile."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper, save
from tritonclient.utils import InferenceServerException

from e2e.server_process import running_server

pytestmark = pytest.mark.gpu

MODEL = "smoke"
MAX_BATCH = 8


def make_onnx(path: Path) -> None:
    """y = relu(x @ w + b), s = 2 * x for x [batch, 4] (batch dynamic)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
    two = numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["xwb"]),
            helper.make_node("Relu", ["xwb"], ["y"]),
            helper.make_node("Mul", ["x", "two"], ["s"]),
        ],
        "smoke",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, ["batch", 4]),
        ],
        initializer=[w, b, two],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, str(path))


def convert(onnx: Path, repo: Path) -> None:
    command = [
        sys.executable, "-m", "modelhost.backends.tensorrt.convert",
        "--onnx", str(onnx),
        "--output", f"{repo / MODEL / '1'}/",
        "--min-shapes", "x:1x4", "--opt-shapes", "x:4x4", "--max-shapes", f"x:{MAX_BATCH}x4",
        "--write-config",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"the conversion failed:\n{done.stdout}{done.stderr}"
    config = (repo / MODEL / "config.pbtxt").read_text()
    assert f"max_batch_size: {MAX_BATCH}" in config, config
    assert 'platform: "tensorrt_plan"' in config, config


def check_answers(onnx: Path, http_port: int, grpc_port: int) -> None:
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    want_y, want_s = session.run(["y", "s"], {"x": x})

    http = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
    metadata = http.get_model_config(MODEL)
    assert metadata["platform"] == "tensorrt_plan", metadata
    request = httpclient.InferInput("x", list(x.shape), "FP32")
    request.set_data_from_numpy(x)
    result = http.infer(MODEL, [request], outputs=[httpclient.InferRequestedOutput(n) for n in ("y", "s")])
    np.testing.assert_allclose(result.as_numpy("y"), want_y, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(result.as_numpy("s"), want_s, rtol=1e-3, atol=1e-4)

    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    for batch in (1, MAX_BATCH):  # both ends of the profile
        xb = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
        request_g = grpcclient.InferInput("x", list(xb.shape), "FP32")
        request_g.set_data_from_numpy(xb)
        got = grpc.infer(MODEL, [request_g]).as_numpy("y")
        np.testing.assert_allclose(got, session.run(["y"], {"x": xb})[0], rtol=1e-3, atol=1e-4)

    too_big = grpcclient.InferInput("x", [MAX_BATCH + 1, 4], "FP32")
    too_big.set_data_from_numpy(np.zeros((MAX_BATCH + 1, 4), dtype=np.float32))
    with pytest.raises(InferenceServerException):
        grpc.infer(MODEL, [too_big])


def test_a_plan_built_here_answers_as_the_onnx_model(tmp_path: Path) -> None:
    pytest.importorskip("tensorrt", reason="needs the tensorrt extra (pip install 'modelhost[tensorrt]')")
    onnx, repo = tmp_path / "smoke.onnx", tmp_path / "repo"
    make_onnx(onnx)
    convert(onnx, repo)
    with running_server([repo], tmp_path / "server.log") as server:
        check_answers(onnx, server.http_port, server.grpc_port)
