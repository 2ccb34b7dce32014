"""The config-against-model check every backend runs at load (backends/model_io.py)."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.backends.model_io import TensorInfo, check_io
from modelhost.errors import ModelConfigError


def config(text: str) -> ModelConfig:
    return text_format.Parse(text, ModelConfig(name="m"))


BATCHED = config(
    "max_batch_size: 8 input [ { name: 'x' data_type: TYPE_FP32 dims: [ 4 ] } ] "
    "output [ { name: 'y' data_type: TYPE_FP32 dims: [ 2 ] } ]"
)
MODEL_IN = {"x": TensorInfo("x", "TYPE_FP32", (-1, 4))}
MODEL_OUT = {"y": TensorInfo("y", "TYPE_FP32", (-1, 2))}


def test_a_matching_config_passes() -> None:
    check_io("m", BATCHED, MODEL_IN, MODEL_OUT)


def test_a_dimension_that_contradicts_the_model_is_refused_with_triton_wording() -> None:
    model_in = {"x": TensorInfo("x", "TYPE_FP32", (-1, 5))}
    with pytest.raises(ModelConfigError) as e:
        check_io("m", BATCHED, model_in, MODEL_OUT)
    assert str(e.value) == (
        "model 'm', tensor 'x': the model expects 2 dimensions (shape [-1,5]) but the model configuration "
        "specifies 2 dimensions (an initial batch dimension because max_batch_size > 0 followed by the explicit "
        "tensor shape, making complete shape [-1,4])"
    )


def test_a_rank_that_contradicts_the_model_is_refused() -> None:
    unbatched = config(
        "input [ { name: 'x' data_type: TYPE_FP32 dims: [ 4 ] } ] "
        "output [ { name: 'y' data_type: TYPE_FP32 dims: [ 2 ] } ]"
    )
    with pytest.raises(
        ModelConfigError, match=r"expects 2 dimensions \(shape \[-1,4\]\).*1 dimensions \(shape \[4\]\)"
    ):
        check_io("m", unbatched, MODEL_IN, {"y": TensorInfo("y", "TYPE_FP32", (2,))})


def test_batching_needs_a_variable_first_dimension() -> None:
    fixed = {"x": TensorInfo("x", "TYPE_FP32", (1, 4))}
    with pytest.raises(ModelConfigError, match="the first dimension must be -1"):
        check_io("m", BATCHED, fixed, MODEL_OUT)


def test_variable_model_dimensions_and_config_wildcards_pass() -> None:
    wildcard = config(
        "max_batch_size: 8 input [ { name: 'x' data_type: TYPE_FP32 dims: [ -1 ] } ] "
        "output [ { name: 'y' data_type: TYPE_FP32 dims: [ 2 ] } ]"
    )
    check_io("m", wildcard, MODEL_IN, {"y": TensorInfo("y", "TYPE_FP32", (-1, -1))})


def test_reshape_is_what_the_model_sees() -> None:
    reshaped = config(
        "max_batch_size: 8 input [ { name: 'x' data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ] "
        "output [ { name: 'y' data_type: TYPE_FP32 dims: [ 2 ] } ]"
    )
    check_io("m", reshaped, {"x": TensorInfo("x", "TYPE_FP32", (-1, 2, 2))}, MODEL_OUT)
    with pytest.raises(ModelConfigError, match="tensor 'x'"):
        check_io("m", reshaped, MODEL_IN, MODEL_OUT)


def test_names_and_datatypes() -> None:
    with pytest.raises(ModelConfigError, match="configuration expects output 'y' but the model has only"):
        check_io("m", BATCHED, MODEL_IN, {"z": TensorInfo("z", "TYPE_FP32", (-1, 2))})
    with pytest.raises(
        ModelConfigError, match="expects datatype TYPE_FP32 for input 'x', model provides TYPE_INT64"
    ):
        check_io("m", BATCHED, {"x": TensorInfo("x", "TYPE_INT64", (-1, 4))}, MODEL_OUT)
    extra = {**MODEL_IN, "mask": TensorInfo("mask", "TYPE_BOOL", (-1, 4))}
    with pytest.raises(
        ModelConfigError, match=r"model input\(s\) \['mask'\] are missing from the configuration"
    ):
        check_io("m", BATCHED, extra, MODEL_OUT)
    check_io("m", BATCHED, extra, MODEL_OUT, fed_by_server={"mask"})


def test_unknown_model_shapes_and_types_are_not_checked() -> None:
    check_io("m", BATCHED, {"x": TensorInfo("x", None, None)}, {"y": TensorInfo("y", None, None)})
