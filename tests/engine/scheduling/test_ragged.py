"""Ragged batching's tensors: what a batch of requests becomes for the model, and how outputs go back."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.engine.scheduling.ragged import RaggedBatching
from modelhost.errors import ModelConfigError


def ragged(batch_inputs: str, extra: str = "") -> RaggedBatching:
    return RaggedBatching(
        text_format.Parse(
            'name: "m" max_batch_size: 8 '
            'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, 2 ] allow_ragged_batch: true } ] '
            'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1, 2 ] } ] '
            f"{batch_inputs} {extra}",
            ModelConfig(),
        )
    )


def batch_input(kind: str, dtype: str = "TYPE_INT32") -> str:
    return f'batch_input [ {{ kind: {kind} target_name: "B" data_type: {dtype} source_input: "X" }} ]'


REQUESTS = [{"X": np.ones((1, 3, 2), np.float32)}, {"X": np.ones((2, 1, 2), np.float32)}]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("BATCH_ELEMENT_COUNT", [6, 4]),
        ("BATCH_ACCUMULATED_ELEMENT_COUNT", [6, 10]),
        ("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", [0, 6, 10]),
        ("BATCH_ITEM_SHAPE", [[3, 2], [1, 2], [1, 2]]),
        ("BATCH_ITEM_SHAPE_FLATTEN", [3, 2, 1, 2, 1, 2]),
    ],
)
def test_batch_inputs(kind: str, expected: list[int]) -> None:
    inputs = ragged(batch_input(kind)).compose(REQUESTS)
    assert inputs["B"].dtype == np.int32
    assert inputs["B"].tolist() == expected
    assert inputs["X"].shape == (10,)  # ragged: both requests' numbers, flattened, one after the other


def test_max_element_count_as_shape_and_its_type() -> None:
    inputs = ragged(batch_input("BATCH_MAX_ELEMENT_COUNT_AS_SHAPE", "TYPE_FP32")).compose(REQUESTS)
    assert inputs["B"].shape == (6,)
    assert inputs["B"].dtype == np.float32


def test_ragged_shapes_share_a_batch_key() -> None:
    batching = ragged("")
    assert batching.key(REQUESTS[0]) == batching.key(REQUESTS[1])


def test_a_scatter_output_goes_back_in_the_shape_of_each_source_input() -> None:
    batching = ragged(
        "", 'batch_output [ { target_name: "Y" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "X" } ]'
    )
    y = np.arange(10, dtype=np.float32)
    first, second = batching.split({"Y": y}, [(REQUESTS[0], 1, ["Y"]), (REQUESTS[1], 2, ["Y"])])
    assert first["Y"].tolist() == [[[0, 1], [2, 3], [4, 5]]]
    assert second["Y"].tolist() == [[[6, 7]], [[8, 9]]]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "B" data_type: TYPE_INT32 source_input: "Z" } ]',
            "unknown source input 'Z'",
        ),
        (
            'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "B" data_type: TYPE_UINT8 source_input: "X" } ]',
            "must be of type",
        ),
        (
            'batch_output [ { target_name: "W" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "X" } ]',
            "is not an output of the model",
        ),
    ],
)
def test_bad_batch_inputs_and_outputs_fail_the_load(text: str, message: str) -> None:
    with pytest.raises(ModelConfigError, match=message):
        ragged(text)
