"""SavedModel auto-complete from the serving signature (Triton's tensorflow_backend AutoCompleteHelper rules)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import pytest
from tritonclient.grpc.model_config_pb2 import DataType

from modelhost.backends.model_config import load_model_config
from modelhost.errors import ModelConfigError

from .conftest import ModelFactory
from .models import fixed_rows, graphdef, grid, matmul, parameters, scalar, two_signatures, unknown_rank


def _ios(ios: Iterable[Any]) -> list[tuple[str, str, list[int], bool]]:
    return [(io.name, DataType.Name(io.data_type), list(io.dims), io.HasField("reshape")) for io in ios]


def test_no_config_batching_signature(make_model: ModelFactory, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        config = load_model_config(make_model("mm", matmul))
    assert (config.platform, config.backend, config.default_model_filename) == (
        "tensorflow_savedmodel",
        "tensorflow",
        "model.savedmodel",
    )
    assert config.max_batch_size == 4
    assert config.HasField("dynamic_batching")
    # Sorted by signature key; a [-1] tensor is one element per batch item, reshaped to the model's scalar.
    assert _ios(config.input) == [("s", "TYPE_STRING", [1], True), ("x", "TYPE_FP32", [3], False)]
    assert list(config.input[0].reshape.shape) == []
    assert _ios(config.output) == [("t", "TYPE_STRING", [1], True), ("y", "TYPE_FP32", [1], False)]
    group = config.instance_group[0]
    assert (group.count, group.kind) == (2, group.KIND_CPU)  # Triton's 2 CPU instances for tensorflow
    assert "autofilled max_batch_size to 4 for model 'mm'" in caplog.text


def test_default_max_batch_size(make_model: ModelFactory) -> None:
    config = load_model_config(make_model("mm", matmul), default_max_batch_size=16)
    assert config.max_batch_size == 16


def test_default_max_batch_size_zero_keeps_the_batch_dimension(make_model: ModelFactory) -> None:
    config = load_model_config(make_model("mm", matmul), default_max_batch_size=0)
    assert config.max_batch_size == 0
    assert not config.HasField("dynamic_batching")
    assert _ios(config.input)[1] == ("x", "TYPE_FP32", [-1, 3], False)


def test_signature_without_batch_dimension(make_model: ModelFactory) -> None:
    config = load_model_config(make_model("rows", fixed_rows))
    assert config.max_batch_size == 0
    assert not config.HasField("dynamic_batching")
    assert _ios(config.input) == [("a", "TYPE_INT32", [2, -1], False)]
    assert _ios(config.output) == [("doubled", "TYPE_INT32", [2, -1], False)]


def test_max_batch_size_for_a_signature_that_cannot_batch(make_model: ModelFactory) -> None:
    with pytest.raises(
        ModelConfigError, match="configuration specified max-batch 8 but model signature does not"
    ):
        load_model_config(make_model("rows", fixed_rows, "max_batch_size: 8"))


def test_config_dims_with_the_batch_dimension_say_no_batching(make_model: ModelFactory) -> None:
    config = load_model_config(
        make_model("mm", matmul, 'input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]')
    )
    assert config.max_batch_size == 0
    # The config's inputs are kept as given; only the outputs are filled, with the batch dimension.
    assert _ios(config.input) == [("x", "TYPE_FP32", [-1, 3], False)]
    assert _ios(config.output) == [("t", "TYPE_STRING", [-1], False), ("y", "TYPE_FP32", [-1, 1], False)]


def test_config_dims_without_the_batch_dimension_say_batching(make_model: ModelFactory) -> None:
    config = load_model_config(
        make_model("mm", matmul, 'output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]')
    )
    assert config.max_batch_size == 4


def test_contradicting_hints(make_model: ModelFactory) -> None:
    text = (
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]\n'
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]'
    )
    with pytest.raises(ModelConfigError, match="contradicting each other in terms of whether batching"):
        load_model_config(make_model("mm", matmul, text))


def test_listed_tensors_get_missing_type_and_dims(make_model: ModelFactory) -> None:
    config = load_model_config(make_model("mm", matmul, 'max_batch_size: 2 output [ { name: "y" } ]'))
    assert _ios(config.output) == [("y", "TYPE_FP32", [1], False)]
    assert len(config.input) == 2


def test_rank_zero_tensor(make_model: ModelFactory) -> None:
    with pytest.raises(ModelConfigError, match="the rank of model tensor 'x' is 0 which is not supported"):
        load_model_config(make_model("scalar", scalar))


def test_unknown_rank_tensor(make_model: ModelFactory) -> None:
    with pytest.raises(ModelConfigError, match="the rank of model tensor 'x' is 0 which is not supported"):
        load_model_config(make_model("any", unknown_rank))


def test_signature_parameter_decides_what_is_filled(make_model: ModelFactory) -> None:
    config = load_model_config(make_model("two", two_signatures, parameters(TF_SIGNATURE_DEF="scale")))
    assert _ios(config.output) == [("scaled", "TYPE_FP32", [2], False)]


def test_default_model_filename(make_model: ModelFactory) -> None:
    text = 'platform: "tensorflow_savedmodel" default_model_filename: "other.savedmodel"'
    config = load_model_config(make_model("g", grid, text, filename="other.savedmodel"))
    assert config.platform == "tensorflow_savedmodel"
    assert _ios(config.output) == [("count", "TYPE_INT64", [1], True), ("flat", "TYPE_FP32", [4], False)]


def test_missing_savedmodel(make_model: ModelFactory) -> None:
    model_dir = make_model("mm", matmul, 'platform: "tensorflow_savedmodel" default_model_filename: "absent"')
    with pytest.raises(ModelConfigError, match="contains the SavedModel directory 'absent'"):
        load_model_config(model_dir)


def test_graphdef_needs_its_inputs_and_outputs_listed(make_model: ModelFactory) -> None:
    model_dir = make_model("g", graphdef, None, filename="model.graphdef")
    with pytest.raises(ModelConfigError, match="a GraphDef does not describe its inputs and outputs"):
        load_model_config(model_dir)
