"""The sequence contract (backends/sequence.py): a request's correlation id and flags, the inputs the server feeds,
and what it feeds (`SequenceFeed`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from engine.scheduling.sequence_fakes import CONTROLS, STATE
from modelhost.backends.sequence import (
    SEQUENCE_END,
    SEQUENCE_START,
    SequenceFeed,
    sequence_params,
    server_fed_inputs,
)
from modelhost.errors import InvalidArgument
from modelhost.types import InferenceRequest


def test_sequence_params_as_triton_request_holds_them() -> None:
    assert sequence_params(None) == (0, 0)
    assert sequence_params(InferenceRequest("m")) == (0, 0)
    request = InferenceRequest("m", parameters={"sequence_id": "s1", "sequence_start": True})
    assert sequence_params(request) == ("s1", SEQUENCE_START)
    request = InferenceRequest(
        "m", parameters={"sequence_id": 9, "sequence_end": True, "sequence_start": False}
    )
    assert sequence_params(request) == (9, SEQUENCE_END)


def test_server_fed_inputs_are_controls_and_states() -> None:
    config = text_format.Parse(f"max_batch_size: 2 sequence_batching {{ {CONTROLS} {STATE} }}", ModelConfig())
    assert server_fed_inputs(config) == {"START", "END", "READY", "CORRID", "STATE_IN"}
    assert server_fed_inputs(ModelConfig()) == set()


def feed(text: str = f"max_batch_size: 2 sequence_batching {{ {CONTROLS} {STATE} }}") -> SequenceFeed:
    return SequenceFeed(text_format.Parse(text, ModelConfig(name="seq")), Path("."))


def test_a_request_gets_its_controls_and_its_sequences_state() -> None:
    fed_by = feed()
    state = {s.input_name: s.initial for s in fed_by.states}
    assert state["STATE_IN"].tolist() == [[0]]
    data = np.ones((1, 1), dtype=np.int32)
    fed = fed_by.inputs({"IN": data}, 7, SEQUENCE_START, state)
    assert fed["IN"] is data and fed["STATE_IN"] is state["STATE_IN"]
    assert fed["START"].dtype == np.int32 and fed["START"].tolist() == [[1]]
    assert fed["END"].dtype == np.float32 and fed["END"].tolist() == [[0.0]]
    assert fed["READY"].tolist() == [[True]] and fed["CORRID"].tolist() == [[7]]
    assert feed(f"sequence_batching {{ {CONTROLS} }}").inputs({}, 7, SEQUENCE_END, {})["END"].tolist() == [1.0]


def test_a_string_id_for_a_numeric_corrid_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="expects a numeric correlation ID, got 'abc'"):
        feed().inputs({}, "abc", SEQUENCE_START, {})


def test_a_null_row_is_zeros_not_ready_and_the_initial_state() -> None:
    row = feed().null_row({"IN": np.full((1, 3), 5, dtype=np.int32), "S": np.array([[b"x"]], dtype=object)})
    assert row["IN"].tolist() == [[0, 0, 0]] and row["S"].tolist() == [[b""]]
    assert row["READY"].tolist() == [[False]] and row["START"].tolist() == [[0]] and row["CORRID"].tolist() == [[0]]
    assert row["STATE_IN"].tolist() == [[0]]


def test_the_state_is_kept_whole_or_as_a_copy_of_its_row() -> None:
    fed_by = feed()
    state = {s.input_name: s.initial for s in fed_by.states}
    whole = np.array([[4]], dtype=np.int32)
    fed_by.keep_state(state, {"STATE_OUT": whole}, None)
    assert state["STATE_IN"] is whole  # no copy, however large the state grows
    batch = np.array([[1], [2]], dtype=np.int64)
    fed_by.keep_state(state, {"STATE_OUT": batch}, 1)
    assert state["STATE_IN"].tolist() == [[2]] and state["STATE_IN"].dtype == np.int32
    assert not np.shares_memory(state["STATE_IN"], batch)
    fed_by.keep_state(state, {}, 0)  # the model left the state out: it stays
    assert state["STATE_IN"].tolist() == [[2]]
