"""TensorRT auto-complete on fake engine descriptions (tensorrt_backend AutoCompleteConfigHelper's rules)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import pytest
from tritonclient.grpc.model_config_pb2 import DataType
from trt_fakes import batch_engine, dynamic_input, engine, gpu_config, output, static_input

from modelhost.backends.tensorrt.autocomplete import autocomplete_from_engine
from modelhost.backends.tensorrt.engine import EngineTensor
from modelhost.errors import ModelConfigError


def _ios(ios: Iterable[Any]) -> list[tuple[str, str, list[int]]]:
    return [(io.name, DataType.Name(io.data_type), list(io.dims)) for io in ios]


def test_dynamic_batch_engine_gets_batching_and_a_dynamic_batcher() -> None:
    cfg = gpu_config()
    autocomplete_from_engine(cfg, batch_engine(max_batch=8), "trt")
    assert cfg.max_batch_size == 8
    assert _ios(cfg.input) == [("x", "TYPE_FP32", [3])]
    assert _ios(cfg.output) == [("y", "TYPE_FP32", [2])]
    assert cfg.HasField("dynamic_batching")
    assert not cfg.input[0].is_shape_tensor and not cfg.input[0].is_non_linear_format_io


def test_static_engine_batch_of_one_has_no_dynamic_batcher() -> None:
    cfg = gpu_config()
    autocomplete_from_engine(cfg, engine(static_input("x", (1, 3)), output("y", (1, 2))), "trt")
    assert cfg.max_batch_size == 1
    assert _ios(cfg.input) == [("x", "TYPE_FP32", [3])]
    assert not cfg.HasField("dynamic_batching")


def test_max_batch_is_the_smallest_dim0_of_the_inputs_max_shapes() -> None:
    eng = engine(
        dynamic_input("x", (-1, 3), ((1, 3), (4, 3), (8, 3))),
        dynamic_input("w", (-1, 5), ((1, 5), (2, 5), (4, 5)), trt_type="INT32"),
        output("y", (-1,)),
    )
    cfg = gpu_config()
    autocomplete_from_engine(cfg, eng, "trt")
    assert cfg.max_batch_size == 4
    assert _ios(cfg.input) == [("x", "TYPE_FP32", [3]), ("w", "TYPE_INT32", [5])]


def test_a_scalar_per_batch_item_gets_dims_1_and_an_empty_reshape() -> None:
    eng = engine(dynamic_input("x", (-1,), ((1,), (4,), (4,))), output("y", (-1,)))
    cfg = gpu_config()
    autocomplete_from_engine(cfg, eng, "trt")
    assert cfg.max_batch_size == 4
    assert list(cfg.input[0].dims) == [1]
    assert cfg.input[0].HasField("reshape") and list(cfg.input[0].reshape.shape) == []


def _two_profiles() -> Any:
    # profile 0 takes batches up to 4, profile 1 up to 16
    return engine(
        dynamic_input("x", (-1, 3), ((1, 3), (2, 3), (4, 3)), ((8, 3), (16, 3), (16, 3))),
        output("y", (-1, 2)),
        num_profiles=2,
    )


@pytest.mark.parametrize(
    ("profiles", "expected"),
    [([], 4), (["0"], 4), (["1"], 16), (["0", "1"], 16)],
)
def test_several_profiles_max_batch_follows_the_selected_profiles(profiles: list[str], expected: int) -> None:
    cfg = gpu_config()
    cfg.instance_group[0].profile.extend(profiles)
    autocomplete_from_engine(cfg, _two_profiles(), "trt")
    assert cfg.max_batch_size == expected


def test_profiles_of_every_instance_group_count() -> None:
    cfg = gpu_config()
    cfg.instance_group[0].profile.append("0")
    second = cfg.instance_group.add(name="second", kind=cfg.instance_group[0].kind, gpus=[0])
    second.profile.append("1")
    autocomplete_from_engine(cfg, _two_profiles(), "trt")
    assert cfg.max_batch_size == 16


def test_a_profile_the_engine_lacks_is_an_error() -> None:
    cfg = gpu_config()
    cfg.instance_group[0].profile.append("2")
    with pytest.raises(ModelConfigError) as e:
        autocomplete_from_engine(cfg, _two_profiles(), "trt")
    assert str(e.value) == (
        "unable to autofill for 'trt', configuration specified invalid profile 2 . Number of profiles supported "
        "by TensorRT engine: 2"
    )


def test_config_dims_of_the_full_rank_turn_batching_off(caplog: pytest.LogCaptureFixture) -> None:
    cfg = gpu_config('input { name: "x" dims: [-1, 3] }')
    with caplog.at_level(logging.WARNING):
        autocomplete_from_engine(cfg, batch_engine(), "trt")
    assert cfg.max_batch_size == 0
    assert not cfg.HasField("dynamic_batching")
    assert _ios(cfg.input) == [("x", "TYPE_FP32", [-1, 3])]  # datatype filled in, dims kept
    assert _ios(cfg.output) == [("y", "TYPE_FP32", [-1, 2])]  # the full engine shape
    assert "hints that batching is unavailable" in caplog.text


def test_config_dims_one_shorter_than_the_engine_mean_batching() -> None:
    cfg = gpu_config('input { name: "x" dims: [3] }')
    autocomplete_from_engine(cfg, batch_engine(max_batch=8), "trt")
    assert cfg.max_batch_size == 8


def test_full_rank_dims_with_a_max_batch_size_is_an_error() -> None:
    cfg = gpu_config('max_batch_size: 4 input { name: "x" dims: [-1, 3] }')
    with pytest.raises(
        ModelConfigError,
        match="configuration specified max-batch 4 but TensorRT engine only supports max-batch 0",
    ):
        autocomplete_from_engine(cfg, batch_engine(), "trt")


def test_a_max_batch_size_over_the_engines_is_an_error() -> None:
    cfg = gpu_config("max_batch_size: 32")
    with pytest.raises(ModelConfigError) as e:
        autocomplete_from_engine(cfg, batch_engine(max_batch=8), "trt")
    assert str(e.value) == (
        "autofill failed for model 'trt': configuration specified max-batch 32 but TensorRT engine only "
        "supports max-batch 8"
    )


def test_a_smaller_max_batch_size_is_kept_and_the_dynamic_batcher_added() -> None:
    cfg = gpu_config("max_batch_size: 2")
    autocomplete_from_engine(cfg, batch_engine(max_batch=8), "trt")
    assert cfg.max_batch_size == 2
    assert cfg.HasField("dynamic_batching")


def test_a_configured_scheduler_is_kept() -> None:
    cfg = gpu_config("sequence_batching {}")
    autocomplete_from_engine(cfg, batch_engine(max_batch=8), "trt")
    assert not cfg.HasField("dynamic_batching")


def test_listed_tensors_keep_what_they_say_and_get_what_they_leave_out() -> None:
    cfg = gpu_config('input { name: "x" } output { name: "y" data_type: TYPE_FP32 dims: [2] }')
    autocomplete_from_engine(cfg, batch_engine(), "trt")
    assert _ios(cfg.input) == [("x", "TYPE_FP32", [3])]
    assert _ios(cfg.output) == [("y", "TYPE_FP32", [2])]


def test_a_tensor_the_engine_lacks_is_named() -> None:
    cfg = gpu_config('input { name: "z" data_type: TYPE_FP32 dims: [3] }')
    with pytest.raises(ModelConfigError) as e:
        autocomplete_from_engine(cfg, batch_engine(), "trt")
    assert str(e.value) == "unexpected inference input 'z', allowed inputs are: x"


def test_contradicting_batching_hints_are_an_error() -> None:
    cfg = gpu_config('input { name: "x" dims: [3] } output { name: "y" dims: [-1, 2] }')
    with pytest.raises(ModelConfigError, match="contradicting each other in terms of whether batching"):
        autocomplete_from_engine(cfg, batch_engine(), "trt")


def test_a_batching_hint_on_an_engine_without_batching_is_an_error() -> None:
    eng = engine(static_input("x", ()), output("y", ()))
    cfg = gpu_config('input { name: "x" allow_ragged_batch: true }')
    with pytest.raises(
        ModelConfigError, match="hints for dynamic batching but the underlying engine doesn't"
    ):
        autocomplete_from_engine(cfg, eng, "trt")


def test_an_engine_type_without_config_name_is_an_error() -> None:
    eng = engine(dynamic_input("x", (-1, 3), ((1, 3), (4, 3), (4, 3)), trt_type="FP8"), output("y", (-1,)))
    with pytest.raises(ModelConfigError, match="TensorRT datatype FP8, which has no model config datatype"):
        autocomplete_from_engine(gpu_config(), eng, "trt")


def test_marking_a_plain_tensor_as_shape_tensor_is_an_error() -> None:
    cfg = gpu_config('input { name: "x" is_shape_tensor: true }')
    with pytest.raises(ModelConfigError, match=r"'x' is incorrectly specified as a shape tensor\."):
        autocomplete_from_engine(cfg, batch_engine(), "trt")


def test_types_map_as_in_triton() -> None:
    types = ["FLOAT", "HALF", "BF16", "INT8", "UINT8", "INT32", "INT64", "BOOL"]
    tensors: list[EngineTensor] = [
        dynamic_input(f"in_{t}", (-1, 1), ((1, 1), (2, 1), (2, 1)), trt_type=t) for t in types
    ]
    cfg = gpu_config()
    autocomplete_from_engine(cfg, engine(*tensors, output("y", (-1,))), "trt")
    assert [DataType.Name(io.data_type) for io in cfg.input] == [
        "TYPE_FP32",
        "TYPE_FP16",
        "TYPE_BF16",
        "TYPE_INT8",
        "TYPE_UINT8",
        "TYPE_INT32",
        "TYPE_INT64",
        "TYPE_BOOL",
    ]
