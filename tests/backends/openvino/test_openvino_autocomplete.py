"""Auto-complete of openvino models: batching from layouts or dynamic first dimensions, inputs and outputs."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import openvino as ov
import openvino.opset13 as ops
import pytest
from ov_test_models import MakeModel, add_sub, identity, mlp, row_sum, save, with_layout, write_onnx_add
from tritonclient.grpc.model_config_pb2 import DataType

from modelhost.backends.model_config import load_model_config
from modelhost.errors import ModelConfigError


def _ios(ios: Iterable[Any]) -> list[tuple[str, str, list[int]]]:
    return [(io.name, DataType.Name(io.data_type), list(io.dims)) for io in ios]


def test_ir_with_dynamic_first_dim_batches(make_model: MakeModel, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        config = load_model_config(make_model("mlp", mlp()))
    assert config.backend == "openvino"
    assert config.default_model_filename == "model.xml"
    assert config.max_batch_size == 4
    assert _ios(config.input) == [("INPUT0", "TYPE_FP32", [8])]
    assert _ios(config.output) == [("OUTPUT0", "TYPE_FP32", [3])]
    assert list(config.dynamic_batching.preferred_batch_size) == [4]
    assert "autofilled max_batch_size to 4 for model 'mlp'" in caplog.text


def test_default_max_batch_size(make_model: MakeModel) -> None:
    config = load_model_config(make_model("mlp", mlp()), default_max_batch_size=16)
    assert config.max_batch_size == 16


def test_default_max_batch_size_zero_keeps_the_batch_dim(make_model: MakeModel) -> None:
    config = load_model_config(make_model("mlp", mlp()), default_max_batch_size=0)
    assert config.max_batch_size == 0
    assert not config.HasField("dynamic_batching")
    assert _ios(config.input) == [("INPUT0", "TYPE_FP32", [-1, 8])]


def test_max_batch_size_one_adds_no_dynamic_batching(make_model: MakeModel) -> None:
    config = load_model_config(make_model("mlp", mlp()), default_max_batch_size=1)
    assert config.max_batch_size == 1
    assert not config.HasField("dynamic_batching")


def test_static_first_dim_does_not_batch(make_model: MakeModel) -> None:
    config = load_model_config(make_model("fixed", add_sub(shape=(2, 4))))
    assert config.max_batch_size == 0
    assert _ios(config.input) == [("INPUT0", "TYPE_FP32", [2, 4]), ("INPUT1", "TYPE_FP32", [2, 4])]


def test_layout_with_batch_first_decides_over_a_static_dim(make_model: MakeModel) -> None:
    config = load_model_config(make_model("nc", with_layout("NC", (1, 4))))
    assert config.max_batch_size == 4
    assert _ios(config.input) == [("X", "TYPE_FP32", [4])]


def test_layout_without_batch_first_does_not_batch(make_model: MakeModel) -> None:
    config = load_model_config(make_model("cn", with_layout("CN", (-1, 4))))
    assert config.max_batch_size == 0
    assert _ios(config.input) == [("X", "TYPE_FP32", [-1, 4])]


def test_explicit_max_batch_size_on_a_model_that_does_not_batch_warns(
    make_model: MakeModel, caplog: pytest.LogCaptureFixture
) -> None:
    model_dir = make_model("fixed", identity(ov.Type.f32, (2, 3)), 'backend: "openvino"\nmax_batch_size: 2')
    with caplog.at_level(logging.WARNING):
        config = load_model_config(model_dir)
    assert "model layout for model fixed does not support batching" in caplog.text
    # Filled as Triton fills it (batch dim dropped); whether the model runs so is the load's to judge.
    assert config.max_batch_size == 2
    assert _ios(config.input) == [("X", "TYPE_FP32", [3])]


def test_given_inputs_kept_outputs_filled(make_model: MakeModel) -> None:
    config_text = 'max_batch_size: 8\ninput [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]'
    config = load_model_config(make_model("mlp", mlp(), config_text))
    assert config.max_batch_size == 8
    assert _ios(config.input) == [("INPUT0", "TYPE_FP32", [-1])]
    assert _ios(config.output) == [("OUTPUT0", "TYPE_FP32", [3])]


def test_a_config_with_both_lists_batches_only_by_layout(make_model: MakeModel) -> None:
    lists = (
        'backend: "openvino"\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ %s ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ %s ] } ]'
    )
    # Its max_batch_size 0 stands, dynamic first dimension or not ...
    plain = load_model_config(make_model("plain", identity(ov.Type.f32), lists % ("-1, 3", "-1, 3")))
    assert plain.max_batch_size == 0
    # ... unless the model's layouts say batch, as in Triton.
    nc = load_model_config(make_model("nc", with_layout("NC", (-1, 4)), lists % ("4", "4")))
    assert nc.max_batch_size == 4


def test_scalar_per_batch_item_gets_an_empty_reshape(make_model: MakeModel) -> None:
    config = load_model_config(make_model("sum", row_sum()))
    assert _ios(config.output) == [("SUM", "TYPE_FP32", [1])]
    assert config.output[0].HasField("reshape")
    assert list(config.output[0].reshape.shape) == []


@pytest.mark.parametrize(
    ("element", "datatype"),
    [
        (ov.Type.boolean, "TYPE_BOOL"),
        (ov.Type.u8, "TYPE_UINT8"),
        (ov.Type.i64, "TYPE_INT64"),
        (ov.Type.f16, "TYPE_FP16"),
        (ov.Type.f64, "TYPE_FP64"),
        (ov.Type.bf16, "TYPE_BF16"),
        (ov.Type.string, "TYPE_STRING"),
    ],
)
def test_datatypes(make_model: MakeModel, element: Any, datatype: str) -> None:
    config = load_model_config(make_model("typed", identity(element)))
    assert _ios(config.input) == [("X", datatype, [3])]


def test_onnx_file_through_openvino(repo: Path) -> None:
    write_onnx_add(repo / "onnx_add" / "1" / "model.onnx")
    (repo / "onnx_add" / "config.pbtxt").write_text(
        'backend: "openvino"\ndefault_model_filename: "model.onnx"'
    )
    config = load_model_config(repo / "onnx_add")
    assert config.backend == "openvino"
    assert config.max_batch_size == 4
    assert _ios(config.input) == [("A", "TYPE_FP32", [4]), ("B", "TYPE_FP32", [4])]


def test_highest_version_is_read(repo: Path) -> None:
    save(mlp((8, 3)), repo / "m" / "1" / "model.xml")
    save(mlp((5, 2)), repo / "m" / "3" / "model.xml")
    config = load_model_config(repo / "m")
    assert _ios(config.input) == [("INPUT0", "TYPE_FP32", [5])]


def test_unsupported_element_type(make_model: MakeModel) -> None:
    x = ops.parameter(ov.PartialShape([-1, 4]), ov.Type.u4, name="X")
    y = ops.convert(x, ov.Type.f32)
    y.output(0).get_tensor().set_names({"Y"})
    with pytest.raises(ModelConfigError, match="unsupported OpenVINO element type 'u4' for input 'X'"):
        load_model_config(make_model("u4", ov.Model([y], [x])))


def test_dynamic_rank_needs_the_config(make_model: MakeModel) -> None:
    x = ops.parameter(ov.PartialShape.dynamic(), ov.Type.f32, name="X")
    y = ops.relu(x)
    y.output(0).get_tensor().set_names({"Y"})
    with pytest.raises(ModelConfigError, match="input 'X' has a dynamic rank"):
        load_model_config(make_model("anyrank", ov.Model([y], [x])))


def test_corrupt_model_file(repo: Path) -> None:
    (repo / "bad" / "1").mkdir(parents=True)
    (repo / "bad" / "1" / "model.xml").write_text("<net><layers>not IR")
    with pytest.raises(ModelConfigError, match="unable to autofill for 'bad': failed to read OpenVINO model"):
        load_model_config(repo / "bad")


def test_missing_model_file_without_ios(repo: Path) -> None:
    (repo / "none" / "1").mkdir(parents=True)
    (repo / "none" / "config.pbtxt").write_text('backend: "openvino"')
    with pytest.raises(ModelConfigError, match=r"no version directory .* contains 'model\.xml'"):
        load_model_config(repo / "none")


def test_missing_model_file_with_ios_is_left_to_the_load(repo: Path) -> None:
    (repo / "none" / "1").mkdir(parents=True)
    (repo / "none" / "config.pbtxt").write_text(
        'backend: "openvino"\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]'
    )
    config = load_model_config(repo / "none")
    assert config.max_batch_size == 0


def test_disabled_auto_complete_reads_nothing(make_model: MakeModel) -> None:
    config_text = (
        'backend: "openvino"\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]'
    )
    config = load_model_config(make_model("m", identity(ov.Type.f32), config_text), auto_complete=False)
    assert config.max_batch_size == 0
