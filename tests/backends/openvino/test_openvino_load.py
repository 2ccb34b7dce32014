"""Loading openvino models: configs checked against the model, reshapes, devices, kinds, bad files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from ov_test_models import Load, MakeModel, add_sub, fixed_inner_batch, identity, mlp, save
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from modelhost.backends.api import BackendContext
from modelhost.backends.model_config import load_model_config
from modelhost.backends.openvino.backend import OpenVINOBackend
from modelhost.backends.openvino.prepare import prepare_model
from modelhost.backends.openvino.settings import OpenVINOSettings
from modelhost.backends.registry import backend_for
from modelhost.errors import BackendInvalidArgument, ModelConfigError

IO = (
    'input [ { name: "INPUT0" data_type: %s dims: [ %s ] }, { name: "INPUT1" data_type: %s dims: [ %s ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ %s ] }, '
    '{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ %s ] } ]\n'
)


def _add_sub_config(
    max_batch_size: int = 4,
    dims: str = "4",
    in_type: str = "TYPE_FP32",
    extra: str = "",
) -> str:
    return (
        f'backend: "openvino"\nmax_batch_size: {max_batch_size}\n'
        + IO % (in_type, dims, "TYPE_FP32", dims, dims, dims)
        + extra
    )


def test_registry_serves_openvino(make_model: MakeModel) -> None:
    config = load_model_config(make_model("m", mlp()))
    assert isinstance(backend_for(config), OpenVINOBackend)


def test_config_matching_the_model_loads(make_model: MakeModel, load: Load) -> None:
    instance = load(make_model("m", add_sub(), _add_sub_config()))
    assert instance.name == "m_0"


@pytest.mark.parametrize(
    ("config_text", "message"),
    [
        (
            _add_sub_config().replace('"INPUT1"', '"OTHER"'),
            r"configuration expects input 'OTHER' but the model has only \['INPUT0', 'INPUT1'\]",
        ),
        (
            _add_sub_config().replace('name: "OUTPUT1"', 'name: "OUT"'),
            r"configuration expects output 'OUT' but the model has only \['OUTPUT0', 'OUTPUT1'\]",
        ),
        (
            _add_sub_config(in_type="TYPE_STRING"),
            "configuration expects datatype TYPE_STRING for input 'INPUT0', model provides TYPE_FP32",
        ),
        (
            _add_sub_config(dims="5"),
            r"tensor 'INPUT0': the model expects 2 dimensions \(shape \[-1,4\]\) but the model configuration "
            r"specifies 2 dimensions \(an initial batch dimension because max_batch_size > 0 followed by the "
            r"explicit tensor shape, making complete shape \[-1,5\]\)",
        ),
        (
            _add_sub_config(dims="2, 2"),
            r"tensor 'INPUT0': the model expects 2 dimensions \(shape \[-1,4\]\) but the model configuration "
            r"specifies 3 dimensions",
        ),
        (
            _add_sub_config(max_batch_size=0, dims="4"),
            r"tensor 'INPUT0': the model expects 2 dimensions \(shape \[-1,4\]\) but the model configuration "
            r"specifies 1 dimensions \(shape \[4\]\)",
        ),
    ],
)
def test_config_contradicting_the_model_is_refused(
    make_model: MakeModel, load: Load, config_text: str, message: str
) -> None:
    with pytest.raises(ModelConfigError, match=message):
        load(make_model("m", add_sub(), config_text), auto_complete=False)


def test_a_model_input_missing_from_the_config(make_model: MakeModel, load: Load) -> None:
    config_text = (
        'backend: "openvino"\nmax_batch_size: 4\ninput [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]'
    )
    with pytest.raises(
        ModelConfigError, match=r"model input\(s\) \['INPUT1'\] are missing from the configuration"
    ):
        load(make_model("m", add_sub(), config_text))


def test_another_numeric_datatype_is_converted_as_triton_does(make_model: MakeModel, load: Load) -> None:
    instance = load(make_model("m", add_sub(), _add_sub_config(in_type="TYPE_UINT8")))
    a = np.array([[1, 2, 3, 250]], dtype=np.uint8)
    out = instance.execute({"INPUT0": a, "INPUT1": np.ones((1, 4), np.float32)}, ["OUTPUT0"])
    np.testing.assert_array_equal(out["OUTPUT0"], [[2, 3, 4, 251]])
    assert out["OUTPUT0"].dtype == np.float32


def test_fp16_output_of_an_fp32_model(make_model: MakeModel, load: Load) -> None:
    config_text = _add_sub_config().replace(
        'name: "OUTPUT0" data_type: TYPE_FP32', 'name: "OUTPUT0" data_type: TYPE_FP16'
    )
    instance = load(make_model("m", add_sub(), config_text))
    ones = np.ones((2, 4), np.float32)
    out = instance.execute({"INPUT0": ones, "INPUT1": ones}, ["OUTPUT0", "OUTPUT1"])
    assert out["OUTPUT0"].dtype == np.float16
    np.testing.assert_array_equal(out["OUTPUT0"], np.full((2, 4), 2, np.float16))


def test_reshape_io_layers_reshapes_a_fixed_model(make_model: MakeModel, load: Load) -> None:
    config_text = (
        'backend: "openvino"\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]\n'
        'parameters { key: "RESHAPE_IO_LAYERS" value: { string_value: "YES" } }'
    )
    instance = load(make_model("m", identity(ov.Type.f32, (2, 3)), config_text))
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    np.testing.assert_array_equal(instance.execute({"X": x}, ["Y"])["Y"], x)


def test_reshape_io_layers_to_a_shape_the_model_cannot_take(make_model: MakeModel, load: Load) -> None:
    config_text = (
        'backend: "openvino"\nmax_batch_size: 4\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 5 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2, 3 ] } ]\n'
        'parameters { key: "RESHAPE_IO_LAYERS" value: { string_value: "YES" } }'
    )
    with pytest.raises(ModelConfigError, match="OpenVINO cannot reshape the model's inputs"):
        load(make_model("m", fixed_inner_batch(), config_text))


def test_without_reshape_io_layers_a_fixed_dim_is_refused_at_run_time(
    make_model: MakeModel, load: Load
) -> None:
    config_text = (
        'backend: "openvino"\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]'
    )
    instance = load(make_model("m", identity(ov.Type.f32, (2, 3)), config_text))
    with pytest.raises(BackendInvalidArgument, match="openvino error for model 'm'"):
        instance.execute({"X": np.zeros((5, 3), np.float32)}, ["Y"])


def test_static_batch_model_gets_a_dynamic_batch(make_model: MakeModel, load: Load) -> None:
    model = mlp(batch=1)
    instance = load(make_model("m", model, 'backend: "openvino"\nmax_batch_size: 8'))
    x = np.random.default_rng(1).standard_normal((6, 8)).astype(np.float32)
    assert instance.execute({"INPUT0": x}, ["OUTPUT0"])["OUTPUT0"].shape == (6, 3)


def test_a_model_that_cannot_take_a_dynamic_batch_is_fixed_at_max_batch_size(
    make_model: MakeModel, load: Load, caplog: pytest.LogCaptureFixture
) -> None:
    config_text = 'backend: "openvino"\nmax_batch_size: 4'
    instance = load(make_model("m", fixed_inner_batch(4), config_text))
    assert "its batch dimension is fixed at max_batch_size 4" in caplog.text
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    assert instance.execute({"X": x}, ["Y"])["Y"].shape == (4, 2, 3)


def test_a_fixed_batch_the_model_cannot_take_is_refused(make_model: MakeModel, load: Load) -> None:
    with pytest.raises(ModelConfigError, match="OpenVINO cannot reshape the model's inputs"):
        load(make_model("m", fixed_inner_batch(4), 'backend: "openvino"\nmax_batch_size: 8'))


def _group(kind: int) -> ModelInstanceGroup:
    return ModelInstanceGroup(name="m", kind=kind, count=1)


@pytest.mark.parametrize("kind", [ModelInstanceGroup.KIND_GPU, ModelInstanceGroup.KIND_MODEL])
def test_only_cpu_instances(make_model: MakeModel, ctx_of: Callable[..., BackendContext], kind: int) -> None:
    model_dir = make_model("m", mlp())
    config = load_model_config(model_dir)
    name = ModelInstanceGroup.Kind.Name(kind)
    with pytest.raises(
        ModelConfigError,
        match=f"the openvino backend supports only instance groups of kind KIND_CPU, got {name} .*"
        "available OpenVINO devices: CPU",
    ):
        OpenVINOBackend().load_instance(ctx_of(model_dir, config), _group(kind), 0, 0)


def test_a_gpu_group_after_a_cpu_group_is_refused(
    make_model: MakeModel, ctx_of: Callable[..., BackendContext]
) -> None:
    model_dir = make_model("m", mlp())
    config = load_model_config(model_dir)
    backend, ctx = OpenVINOBackend(), ctx_of(model_dir, config, 2)
    instance = backend.load_instance(ctx, config.instance_group[0], 0, 0)
    with pytest.raises(ModelConfigError, match="got KIND_GPU"):
        backend.load_instance(ctx, _group(ModelInstanceGroup.KIND_GPU), 0, 0)
    instance.close()


def _with_params(**parameters: str) -> str:
    text = 'backend: "openvino"\n'
    for key, value in parameters.items():
        text += f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'
    return text


@pytest.mark.parametrize(
    ("device", "missing"),
    [("GPU", "GPU"), ("NPU.1", "NPU.1"), ("HETERO:GPU,CPU", "GPU"), ("MULTI:CPU,GPU.0", "GPU.0")],
)
def test_target_device_must_be_available(
    make_model: MakeModel, load: Load, device: str, missing: str
) -> None:
    with pytest.raises(
        ModelConfigError,
        match=f"TARGET_DEVICE '{device}' names OpenVINO device '{missing}', which is not available "
        r"\(available OpenVINO devices: CPU\)",
    ):
        load(make_model("m", mlp(), _with_params(TARGET_DEVICE=device.lower())))


@pytest.mark.parametrize("device", ["CPU", "AUTO", "AUTO:CPU", "HETERO:CPU"])
def test_target_devices_that_reach_the_cpu(make_model: MakeModel, load: Load, device: str) -> None:
    model = mlp()
    instance = load(make_model("m", model, _with_params(TARGET_DEVICE=device)))
    x = np.ones((2, 8), np.float32)
    assert instance.execute({"INPUT0": x}, ["OUTPUT0"])["OUTPUT0"].shape == (2, 3)


def test_every_parameter_at_once_compiles(make_model: MakeModel, load: Load) -> None:
    parameters = {
        "PERFORMANCE_HINT": "THROUGHPUT",
        "NUM_STREAMS": "2",
        "INFERENCE_NUM_THREADS": "2",
        "COMPILATION_NUM_THREADS": "1",
        "HINT_BF16": "NO",
        "SKIP_OV_DYNAMIC_BATCHSIZE": "NO",
        "ENABLE_BATCH_PADDING": "NO",
        "RESHAPE_IO_LAYERS": "NO",
    }
    instance = load(make_model("m", mlp(), _with_params(**parameters)))
    assert instance.execute({"INPUT0": np.ones((1, 8), np.float32)}, ["OUTPUT0"])["OUTPUT0"].shape == (1, 3)


def test_a_property_the_device_refuses_fails_the_load(make_model: MakeModel, load: Load) -> None:
    with pytest.raises(ModelConfigError, match=r"OpenVINO failed to compile it for BATCH:CPU\(0\)"):
        load(make_model("m", mlp(), _with_params(TARGET_DEVICE="BATCH:CPU(0)")))


def test_cpu_extension_path_must_be_a_file(make_model: MakeModel, load: Load, tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match=r"CPU_EXTENSION_PATH '/no/such/lib\.so' is not a file"):
        load(make_model("m", mlp(), _with_params(CPU_EXTENSION_PATH="/no/such/lib.so")))


def test_cpu_extension_path_must_be_an_extension(make_model: MakeModel, load: Load, tmp_path: Path) -> None:
    fake = tmp_path / "libfake.so"
    fake.write_bytes(b"not a shared library")
    with pytest.raises(
        ModelConfigError, match=f"failed to load CPU_EXTENSION_PATH '{fake}' as an OpenVINO extension"
    ):
        load(make_model("m", mlp(), _with_params(CPU_EXTENSION_PATH=str(fake))))


def test_corrupt_model_file(repo: Path, load: Load) -> None:
    (repo / "bad" / "1").mkdir(parents=True)
    (repo / "bad" / "1" / "model.xml").write_text("<?xml version='1.0'?><net name='x' version='11'><layers>")
    (repo / "bad" / "config.pbtxt").write_text(
        'backend: "openvino"\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]'
    )
    with pytest.raises(
        ModelConfigError, match="unable to load model 'bad' version 1: failed to read OpenVINO model"
    ):
        load(repo / "bad", auto_complete=False)


def test_missing_weights(repo: Path, load: Load) -> None:
    save(mlp(), repo / "m" / "1" / "model.xml")
    (repo / "m" / "1" / "model.bin").unlink()
    (repo / "m" / "config.pbtxt").write_text(
        'backend: "openvino"\nmax_batch_size: 4\ninput [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 8 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]'
    )
    with pytest.raises(ModelConfigError, match="failed to read OpenVINO model"):
        load(repo / "m", auto_complete=False)


def test_missing_model_file(repo: Path, load: Load) -> None:
    save(mlp(), repo / "m" / "1" / "other.xml")
    (repo / "m" / "config.pbtxt").write_text(
        'backend: "openvino"\ninput [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1, 8 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]'
    )
    with pytest.raises(ModelConfigError, match=r"unable to find '.*/1/model.xml' for model 'm' version 1"):
        load(repo / "m", auto_complete=False)


def test_other_default_model_filename(repo: Path, load: Load) -> None:
    save(mlp(), repo / "m" / "1" / "other.xml")
    (repo / "m" / "config.pbtxt").write_text('backend: "openvino"\ndefault_model_filename: "other.xml"')
    instance = load(repo / "m")
    assert instance.execute({"INPUT0": np.ones((1, 8), np.float32)}, ["OUTPUT0"])["OUTPUT0"].shape == (1, 3)


def test_an_unnamed_output_is_refused() -> None:
    x = ops.parameter(ov.PartialShape([-1, 3]), ov.Type.f32, name="X")
    model = ov.Model([ops.relu(x)], [x])
    model.output(0).get_tensor().set_names(set())
    config = ModelConfig(name="m")
    with pytest.raises(ModelConfigError, match="model output 0 has no tensor name"):
        prepare_model(model, config, OpenVINOSettings(), "m", ())


def test_instances_share_one_compiled_model_released_with_the_last(
    make_model: MakeModel, ctx_of: Callable[..., BackendContext]
) -> None:
    model_dir = make_model("m", mlp())
    config = load_model_config(model_dir)
    backend, ctx = OpenVINOBackend(), ctx_of(model_dir, config, 2)
    first = backend.load_instance(ctx, config.instance_group[0], 0, 0)
    second = backend.load_instance(ctx, config.instance_group[0], 1, 0)
    versions: dict[int, Any] = backend._versions
    assert versions[1].users == 2
    compiled = versions[1].compiled
    assert compiled.get_property("NUM_STREAMS") >= 1
    first.close()
    assert versions[1].users == 1
    second.close()
    assert versions == {}
    # A new load of the version (another context) compiles afresh.
    third = backend.load_instance(ctx_of(model_dir, config), config.instance_group[0], 0, 0)
    assert versions[1].compiled is not compiled
    third.close()


def test_sequence_controls_are_fed_by_the_server(make_model: MakeModel, load: Load) -> None:
    # START is a model input the config leaves to the sequence batcher, which feeds it as TYPE_INT32 while the
    # model takes f32: the backend casts it.
    x = ops.parameter(ov.PartialShape([-1, 4]), ov.Type.f32, name="INPUT0")
    start = ops.parameter(ov.PartialShape([-1, 1]), ov.Type.f32, name="START")
    y = ops.multiply(x, start)
    y.output(0).get_tensor().set_names({"OUTPUT0"})
    config_text = (
        'backend: "openvino"\nmax_batch_size: 4\ninput [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'sequence_batching { control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START '
        "int32_false_true: [ 0, 1 ] } ] } ] }"
    )
    instance = load(make_model("seq", ov.Model([y], [x, start]), config_text))
    ones = np.ones((2, 4), np.float32)
    out = instance.execute({"INPUT0": ones, "START": np.array([[1], [0]], np.int32)}, ["OUTPUT0"])
    np.testing.assert_array_equal(out["OUTPUT0"], [[1, 1, 1, 1], [0, 0, 0, 0]])
