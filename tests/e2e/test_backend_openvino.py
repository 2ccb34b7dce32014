"""The openvino backend end to end: OpenVINO models built at test time, served by one real server, asked through
tritonclient HTTP and gRPC, and answered as OpenVINO itself answers in process.

Also: an ONNX file served through OpenVINO, auto-complete, no batching with variable dims, RESHAPE_IO_LAYERS,
warmup and dynamic batching on two instances, batch padding, strings, and the models that must not load (a
corrupt model.xml, a contradicting config, KIND_GPU, an unavailable TARGET_DEVICE), which leave the others serving.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from e2e import server_process
from e2e.clients import Api, failure
from e2e.models import save as save_onnx
from e2e.server_process import LOAD_ALL_EXPLICITLY, RunningServer, running_server


@pytest.fixture(scope="module", autouse=True)
def frontend_processes() -> Iterator[int]:
    """The backend does not depend on the frontend mode: one mode, one server."""
    server_process.frontend_processes = 0
    yield 0


# -- models --------------------------------------------------------------------------------------------------------


def _named(node: Any, name: str) -> Any:
    node.output(0).get_tensor().set_names({name})
    return node


def _mlp(dims: tuple[int, ...], batch: int = -1) -> Any:
    rng = np.random.default_rng(len(dims))
    x = ops.parameter(ov.PartialShape([batch, dims[0]]), ov.Type.f32, name="INPUT0")
    h: Any = x
    for i in range(len(dims) - 1):
        w = rng.standard_normal((dims[i], dims[i + 1])).astype(np.float32) * 0.2
        h = ops.matmul(h, ops.constant(w), False, False)
        if i < len(dims) - 2:
            h = ops.relu(h)
    return ov.Model([_named(h, "OUTPUT0")], [x], "mlp")


def _add_sub(shape: list[int]) -> Any:
    a = ops.parameter(ov.PartialShape(shape), ov.Type.f32, name="INPUT0")
    b = ops.parameter(ov.PartialShape(shape), ov.Type.f32, name="INPUT1")
    return ov.Model([_named(ops.add(a, b), "OUTPUT0"), _named(ops.subtract(a, b), "OUTPUT1")], [a, b])


def _identity(element: Any, shape: list[int]) -> Any:
    x = ops.parameter(ov.PartialShape(shape), element, name="X")
    if element == ov.Type.string:
        y = ops.reshape(x, ops.constant(np.zeros(len(shape), np.int64)), special_zero=True)
    else:
        y = ops.convert(x, element)
    return ov.Model([_named(y, "Y")], [x])


MLP = _mlp((16, 32, 4))
ADD_SUB = _add_sub([-1, 4])


def _save(repo: Path, name: str, model: Any, config: str | None = None, filename: str = "model.xml") -> None:
    (repo / name / "1").mkdir(parents=True)
    ov.save_model(model, str(repo / name / "1" / filename), compress_to_fp16=False)
    if config is not None:
        (repo / name / "config.pbtxt").write_text(config)


def _onnx_add(path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Add", ["A", "B"], ["C"])],
        "add",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 4]) for n in ("A", "B")],
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, ["batch", 4])],
    )
    save_onnx(graph, path)


ADD_SUB_IO = (
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, '
    '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, '
    '{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
)
WARMUP = (
    'model_warmup [ { name: "zeros" batch_size: 2 inputs [ '
    '{ key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }, '
    '{ key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } } ] } ]\n'
)


def _build(repo: Path) -> None:
    _save(repo, "ov_mlp", MLP)  # no config.pbtxt: auto-complete
    _onnx_add(repo / "ov_onnx" / "1" / "model.onnx")
    (repo / "ov_onnx" / "config.pbtxt").write_text(
        'backend: "openvino"\ndefault_model_filename: "model.onnx"\n'
    )
    _save(
        repo,
        "ov_nobatch",
        _add_sub([-1, -1]),
        'backend: "openvino"\nmax_batch_size: 0\n' + ADD_SUB_IO.replace("dims: [ 4 ]", "dims: [ -1, -1 ]"),
    )
    _save(
        repo,
        "ov_reshape",
        _identity(ov.Type.f32, [2, 3]),
        'backend: "openvino"\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]\n'
        'parameters { key: "RESHAPE_IO_LAYERS" value: { string_value: "YES" } }\n',
    )
    _save(
        repo,
        "ov_fixed",
        _identity(ov.Type.f32, [2, 3]),
        'backend: "openvino"\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]\n',
    )
    _save(
        repo,
        "ov_batched",
        ADD_SUB,
        'backend: "openvino"\nmax_batch_size: 8\n'
        + ADD_SUB_IO
        + "dynamic_batching { max_queue_delay_microseconds: 200000 }\n"
        + "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
        + WARMUP,
    )
    _save(
        repo,
        "ov_padded",
        MLP,
        "max_batch_size: 4\n"
        + 'parameters { key: "SKIP_OV_DYNAMIC_BATCHSIZE" value: { string_value: "YES" } }\n'
        + 'parameters { key: "ENABLE_BATCH_PADDING" value: { string_value: "YES" } }\n',
    )
    _save(repo, "ov_strings", _identity(ov.Type.string, [-1, 2]))
    # Models that must not load.
    (repo / "ov_corrupt" / "1").mkdir(parents=True)
    (repo / "ov_corrupt" / "1" / "model.xml").write_text("<?xml version='1.0'?><net name='x' version='11'>")
    (repo / "ov_corrupt" / "config.pbtxt").write_text('backend: "openvino"\nmax_batch_size: 8\n' + ADD_SUB_IO)
    _save(
        repo,
        "ov_contradicts",
        ADD_SUB,
        'backend: "openvino"\nmax_batch_size: 8\n' + ADD_SUB_IO.replace("dims: [ 4 ]", "dims: [ 5 ]"),
    )
    _save(repo, "ov_gpu", MLP, "instance_group [ { kind: KIND_GPU } ]\n")
    _save(repo, "ov_no_device", MLP, 'parameters { key: "TARGET_DEVICE" value: { string_value: "GPU" } }\n')


@pytest.fixture(scope="module")
def ov_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("ov_repo")
    _build(repo)
    return repo


@pytest.fixture(scope="module")
def server(
    ov_repo: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("log") / "server.log"
    with running_server([ov_repo], log, *LOAD_ALL_EXPLICITLY) as running:
        yield running


def _reference(model: Any, inputs: dict[str, np.ndarray], **properties: str) -> list[np.ndarray]:
    compiled = ov.Core().compile_model(model, "CPU", properties)
    results = compiled(inputs)
    return [np.array(results[port]) for port in compiled.outputs]


def _index(server: RunningServer) -> dict[str, dict[str, str]]:
    rows = requests.post(f"http://{server.http_url}/v2/repository/index", timeout=5).json()
    return {row["name"]: row for row in rows}


# -- answers ------------------------------------------------------------------------------------------------------


def test_auto_completed_ir_model(api: Api) -> None:
    config = api.client.get_model_config("ov_mlp")
    if api.name == "grpc":
        config = {"max_batch_size": config.config.max_batch_size, "backend": config.config.backend}
    assert config["max_batch_size"] == 4
    assert config["backend"] == "openvino"
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    out = api.infer("ov_mlp", INPUT0=x).as_numpy("OUTPUT0")
    # f32 unless HINT_BF16 says YES, on any CPU (OpenVINO alone would pick bf16 on CPUs that have it).
    (expected,) = _reference(MLP, {"INPUT0": x}, INFERENCE_PRECISION_HINT="f32")
    assert out.shape == (3, 4)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_onnx_file_through_openvino(api: Api, ov_repo: Path) -> None:
    a = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    b = np.full((2, 4), 0.5, np.float32)
    out = api.infer("ov_onnx", A=a, B=b).as_numpy("C")
    onnx_model = ov.Core().read_model(str(ov_repo / "ov_onnx" / "1" / "model.onnx"))
    (expected,) = _reference(onnx_model, {"A": a, "B": b}, INFERENCE_PRECISION_HINT="f32")
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_allclose(out, a + b, rtol=1e-6)


def test_no_batching_with_variable_dims(api: Api) -> None:
    for shape in ((1, 1), (3, 5)):
        a = np.random.default_rng(shape[1]).standard_normal(shape).astype(np.float32)
        b = np.ones(shape, np.float32)
        result = api.infer("ov_nobatch", INPUT0=a, INPUT1=b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_reshape_io_layers(api: Api) -> None:
    for shape in ((5, 3), (1, 7)):
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        np.testing.assert_array_equal(api.infer("ov_reshape", X=x).as_numpy("Y"), x)


def test_padded_batches(api: Api) -> None:
    x = np.random.default_rng(5).standard_normal((1, 16)).astype(np.float32)
    out = api.infer("ov_padded", INPUT0=x).as_numpy("OUTPUT0")
    (expected,) = _reference(MLP, {"INPUT0": x}, INFERENCE_PRECISION_HINT="f32")
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_strings(api: Api) -> None:
    values = np.array([[b"ab", "ünï".encode()], [b"", b"\xff\x00x"]], dtype=object)
    out = api.infer("ov_strings", X=values).as_numpy("Y")
    assert out.tolist() == values.tolist()


def test_warmup_ran_on_both_instances(server: RunningServer) -> None:
    assert _index(server)["ov_batched"]["state"] == "READY"
    assert "model 'ov_batched': warmup sample 'zeros' ran on 2 instance(s)" in server.log()


def test_dynamic_batching_gathers_requests(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url, concurrency=8)
    try:
        before = client.get_inference_statistics("ov_batched")["model_stats"][0]
        inputs = [np.full((1, 4), i, np.float32) for i in range(8)]
        pending = []
        for a in inputs:
            tensors = []
            for name, array in (("INPUT0", a), ("INPUT1", np.ones((1, 4), np.float32))):
                tensor = httpclient.InferInput(name, [1, 4], "FP32")
                tensor.set_data_from_numpy(array)
                tensors.append(tensor)
            pending.append(client.async_infer("ov_batched", tensors))
        for a, request in zip(inputs, pending, strict=True):
            result = request.get_result()
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + 1)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - 1)
        after = client.get_inference_statistics("ov_batched")["model_stats"][0]
    finally:
        client.close()
    inferences = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferences == 8
    assert executions < 8  # batched by the dynamic batcher into fewer executions


# -- bad input and bad models ---------------------------------------------------------------------------------------


def test_wrong_shape_is_refused_before_the_backend(api: Api) -> None:
    error = failure(lambda: api.infer("ov_mlp", INPUT0=np.ones((1, 5), np.float32)))
    assert error.status() == api.status(400, grpcclient.grpc.StatusCode.INVALID_ARGUMENT)
    assert "unexpected shape for input 'INPUT0' for model 'ov_mlp'. Expected [-1,16], got [1,5]" in str(error)


def test_a_shape_openvino_refuses_answers_400(api: Api) -> None:
    error = failure(lambda: api.infer("ov_fixed", X=np.ones((5, 3), np.float32)))
    assert error.status() == api.status(400, grpcclient.grpc.StatusCode.INVALID_ARGUMENT)
    assert "openvino error for model 'ov_fixed'" in str(error)
    # Its right shape still runs.
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(api.infer("ov_fixed", X=x).as_numpy("Y"), x)


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        ("ov_corrupt", "failed to read OpenVINO model"),
        ("ov_contradicts", "tensor 'INPUT0': the model expects 2 dimensions (shape [-1,4])"),
        ("ov_gpu", "KIND_GPU"),
        (
            "ov_no_device",
            "TARGET_DEVICE 'GPU' names OpenVINO device 'GPU', which is not available (available ",
        ),
    ],
)
def test_models_that_cannot_load_are_unavailable(server: RunningServer, model: str, reason: str) -> None:
    row = _index(server)[model]
    assert row["state"] == "UNAVAILABLE"
    assert reason in row["reason"]


def test_explicit_load_reports_the_reason_and_others_serve(
    http: httpclient.InferenceServerClient, grpc_client: grpcclient.InferenceServerClient
) -> None:
    with pytest.raises(InferenceServerException, match="failed to read OpenVINO model"):
        http.load_model("ov_corrupt")
    with pytest.raises(InferenceServerException, match="available OpenVINO devices: CPU"):
        grpc_client.load_model("ov_no_device")
    assert http.is_model_ready("ov_mlp")
    x = np.ones((1, 16), np.float32)
    assert http.infer("ov_mlp", [_http_input("INPUT0", x)]).as_numpy("OUTPUT0").shape == (1, 4)


def _http_input(name: str, array: np.ndarray) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, list(array.shape), "FP32")
    tensor.set_data_from_numpy(array)
    return tensor
