from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from onnx import TensorProto, helper
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from modelhost.backends.model_config import load_model_config
from modelhost.backends.onnxruntime.autocomplete import autocomplete_onnx, onnx_model_path
from modelhost.errors import ModelConfigError

from .conftest import ModelFactory, add_sub_model, fixed_batch_model, reduce_model, write_onnx


def _ios(ios: Iterable[Any]) -> list[tuple[str, str, list[int]]]:
    return [(io.name, DataType.Name(io.data_type), list(io.dims)) for io in ios]


def test_no_config_add_sub_model(make_model: ModelFactory) -> None:
    config = load_model_config(make_model("simple"))
    assert config.name == "simple"
    assert config.platform == "onnxruntime_onnx"
    assert config.backend == "onnxruntime"
    assert config.default_model_filename == "model.onnx"
    assert config.runtime == ""
    assert config.max_batch_size == 4
    assert _ios(config.input) == [("INPUT0", "TYPE_INT32", [16]), ("INPUT1", "TYPE_INT32", [16])]
    assert _ios(config.output) == [("OUTPUT0", "TYPE_INT32", [16]), ("OUTPUT1", "TYPE_INT32", [16])]
    assert not config.input[0].HasField("reshape")
    assert list(config.dynamic_batching.preferred_batch_size) == [4]
    assert config.version_policy.latest.num_versions == 1
    assert config.optimization.input_pinned_memory.enable
    assert config.optimization.output_pinned_memory.enable
    assert len(config.instance_group) == 1
    group = config.instance_group[0]
    assert (group.name, group.count, group.kind, list(group.gpus)) == ("simple", 2, group.KIND_CPU, [])


def test_no_config_on_a_gpu_server(make_model: ModelFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    from modelhost.backends.onnxruntime.backend import OnnxRuntimeBackend

    # With onnxruntime-gpu (tests/backends/test_registry.py: without it, the CPU).
    monkeypatch.setattr(OnnxRuntimeBackend, "gpu_capable", staticmethod(lambda: True))
    config = load_model_config(make_model("simple"), gpu_count=2)
    group = config.instance_group[0]
    assert (group.name, group.count, group.kind, list(group.gpus)) == ("simple", 1, group.KIND_GPU, [0, 1])


def test_autofill_warns_about_max_batch_size(
    make_model: ModelFactory, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="modelhost.backends.batching_fill"):
        load_model_config(make_model("simple"))
    assert "autofilled max_batch_size to 4 for model 'simple'" in caplog.text


def test_default_max_batch_size_parameter(make_model: ModelFactory) -> None:
    config = load_model_config(make_model("simple"), default_max_batch_size=16)
    assert config.max_batch_size == 16
    assert list(config.dynamic_batching.preferred_batch_size) == [16]


def test_default_max_batch_size_zero_keeps_batch_dim(make_model: ModelFactory) -> None:
    config = load_model_config(make_model("simple"), default_max_batch_size=0)
    assert config.max_batch_size == 0
    assert not config.HasField("dynamic_batching")
    assert _ios(config.input)[0] == ("INPUT0", "TYPE_INT32", [-1, 16])


def test_max_batch_size_one_adds_no_dynamic_batching(make_model: ModelFactory) -> None:
    config = load_model_config(make_model("simple"), default_max_batch_size=1)
    assert config.max_batch_size == 1
    assert not config.HasField("dynamic_batching")


def test_explicit_max_batch_size_kept(make_model: ModelFactory) -> None:
    config = load_model_config(make_model("simple", "max_batch_size: 8"))
    assert config.max_batch_size == 8
    assert list(config.dynamic_batching.preferred_batch_size) == [8]


def test_sequence_batching_prevents_dynamic_batching(make_model: ModelFactory) -> None:
    config = load_model_config(make_model("simple", "sequence_batching {}"))
    assert not config.HasField("dynamic_batching")
    assert config.sequence_batching.max_sequence_idle_microseconds == 1_000_000


def test_non_batching_model_with_max_batch_size_is_an_error(make_model: ModelFactory) -> None:
    model_dir = make_model("fixed", "max_batch_size: 8", builder=fixed_batch_model)
    with pytest.raises(ModelConfigError) as info:
        load_model_config(model_dir)
    assert (
        "autofill failed for model 'fixed': model does not support batching while non-zero max_batch_size is "
        "specified"
    ) in str(info.value)


def test_non_batching_model_without_config(make_model: ModelFactory) -> None:
    config = load_model_config(make_model("fixed", builder=fixed_batch_model))
    assert config.max_batch_size == 0
    assert not config.HasField("dynamic_batching")
    assert _ios(config.input) == [("X", "TYPE_FP32", [3, 4])]
    assert _ios(config.output) == [("Y", "TYPE_FP32", [3, 4])]


def test_scalar_per_batch_item_gets_reshape(make_model: ModelFactory) -> None:
    config = load_model_config(make_model("reduce", builder=reduce_model))
    assert _ios(config.input) == [("X", "TYPE_FP32", [4])]
    output = config.output[0]
    assert (output.name, list(output.dims)) == ("SUM", [1])
    assert output.HasField("reshape")
    assert list(output.reshape.shape) == []


def test_partial_config_fills_only_missing_list(make_model: ModelFactory) -> None:
    text = """
    max_batch_size: 2
    input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
    """
    config = load_model_config(make_model("partial", text))
    # The given input list is kept as is (INPUT1 is not merged in); the missing output list is filled.
    assert _ios(config.input) == [("INPUT0", "TYPE_INT32", [16])]
    assert _ios(config.output) == [("OUTPUT0", "TYPE_INT32", [16]), ("OUTPUT1", "TYPE_INT32", [16])]
    assert config.max_batch_size == 2


def test_complete_config_is_not_touched(make_model: ModelFactory) -> None:
    text = """
    max_batch_size: 0
    input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 7 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 7 ] } ]
    """
    config = load_model_config(make_model("complete", text))
    # Conflicts with the model are checked at load time, not here.
    assert config.max_batch_size == 0
    assert not config.HasField("dynamic_batching")
    assert _ios(config.input) == [("INPUT0", "TYPE_FP32", [7])]


def test_batch_input_counts_as_input(make_model: ModelFactory) -> None:
    model_dir = make_model("simple")
    config = ModelConfig(backend="onnxruntime", default_model_filename="model.onnx")
    config.batch_input.add(target_name=["B"])
    autocomplete_onnx(config, "simple", model_dir)
    assert len(config.input) == 0
    assert len(config.output) == 2


def test_symbolic_and_unknown_dims_become_minus_one(tmp_path: Path) -> None:
    model_dir = tmp_path / "dyn"
    write_onnx(
        model_dir / "1" / "model.onnx",
        [("X", TensorProto.FLOAT, ["batch", "len", 3])],
        [("Y", TensorProto.FLOAT, [None, None, 3])],
        [helper.make_node("Identity", ["X"], ["Y"])],
    )
    config = load_model_config(model_dir)
    assert config.max_batch_size == 4
    assert _ios(config.input) == [("X", "TYPE_FP32", [-1, 3])]
    assert _ios(config.output) == [("Y", "TYPE_FP32", [-1, 3])]


def test_bool_and_string_types(tmp_path: Path) -> None:
    model_dir = tmp_path / "types"
    write_onnx(
        model_dir / "1" / "model.onnx",
        [("B", TensorProto.BOOL, [2]), ("S", TensorProto.STRING, [2])],
        [("B_OUT", TensorProto.BOOL, [2]), ("S_OUT", TensorProto.STRING, [2])],
        [helper.make_node("Identity", ["B"], ["B_OUT"]), helper.make_node("Identity", ["S"], ["S_OUT"])],
    )
    config = load_model_config(model_dir)
    assert _ios(config.input) == [("B", "TYPE_BOOL", [2]), ("S", "TYPE_STRING", [2])]


def test_highest_version_with_model_file_is_read(make_model: ModelFactory) -> None:
    model_dir = make_model("versions", builder=fixed_batch_model, versions=(1,))
    add_sub_model(model_dir / "2" / "model.onnx")
    (model_dir / "3").mkdir()  # no model file
    assert onnx_model_path(model_dir, "model.onnx") == model_dir / "2" / "model.onnx"
    assert load_model_config(model_dir).input[0].name == "INPUT0"


def test_model_onnx_directory(tmp_path: Path) -> None:
    model_dir = tmp_path / "large"
    add_sub_model(model_dir / "1" / "model.onnx" / "model.onnx")
    assert onnx_model_path(model_dir, "model.onnx") == model_dir / "1" / "model.onnx" / "model.onnx"
    assert load_model_config(model_dir).max_batch_size == 4


def test_custom_default_model_filename(tmp_path: Path) -> None:
    model_dir = tmp_path / "named"
    add_sub_model(model_dir / "1" / "net.onnx")
    (model_dir / "config.pbtxt").write_text('backend: "onnxruntime"\ndefault_model_filename: "net.onnx"')
    assert len(load_model_config(model_dir).input) == 2


def test_missing_model_file_is_an_error(tmp_path: Path) -> None:
    model_dir = tmp_path / "nofile"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text('platform: "onnxruntime_onnx"')
    with pytest.raises(ModelConfigError, match=r"unable to autofill for 'nofile'.*'model\.onnx'"):
        load_model_config(model_dir)


def test_corrupt_model_file_is_an_error(tmp_path: Path) -> None:
    model_dir = tmp_path / "corrupt"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.onnx").write_bytes(b"not an onnx model")
    with pytest.raises(ModelConfigError, match="unable to autofill for 'corrupt': failed to load ONNX model"):
        load_model_config(model_dir)


def test_auto_complete_disabled_leaves_io_alone(make_model: ModelFactory) -> None:
    config = load_model_config(make_model("simple", 'platform: "onnxruntime_onnx"'), auto_complete=False)
    assert config.backend == "onnxruntime"
    assert len(config.input) == 0
    assert config.max_batch_size == 0
