"""The sequence contract between the engine and a backend: Triton's request flags and correlation ids, the control
inputs and the implicit state the sequence batcher feeds a stateful model (`sequence_batching`), and which inputs
those are (a client never sends them). The sequence batcher (engine/scheduling/sequence_batcher.py) feeds them
(`SequenceFeed`); the python backend reads the flags and ids; every backend leaves the fed inputs out of its
checks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from tritonclient.grpc.model_config_pb2 import DataType, ModelSequenceBatching

from modelhost.backends.api import Arrays
from modelhost.datatypes import CONFIG_TO_WIRE, WIRE_TO_NUMPY
from modelhost.errors import InvalidArgument, ModelConfigError
from modelhost.types import InferenceRequest

_Kind = ModelSequenceBatching.Control

# Triton's request flags (TRITONSERVER_REQUEST_FLAG_SEQUENCE_START / _END).
SEQUENCE_START = 1
SEQUENCE_END = 2

CorrelationId = int | str


def sequence_params(request: InferenceRequest | None) -> tuple[CorrelationId, int]:
    """A request's correlation id and flags, as Triton's InferenceRequest holds them (0 and 0: no sequence)."""
    if request is None or not request.parameters:  # most requests: nothing to look up
        return 0, 0
    params = request.parameters
    corrid = params.get("sequence_id", 0)
    if isinstance(corrid, bool) or not isinstance(corrid, int | str):
        corrid = 0
    flags = (SEQUENCE_START if params.get("sequence_start") is True else 0) | (
        SEQUENCE_END if params.get("sequence_end") is True else 0
    )
    return corrid, flags


# -- a request that breaks the contract: Triton's words (core sequence_batch_scheduler.cc, sequencer) -----------


def batch_size_error(model: str) -> InvalidArgument:
    return InvalidArgument(
        f"inference request to model '{model}' must specify batch-size 1 due to requirements of sequence batcher"
    )


def correlation_id_error(model: str) -> InvalidArgument:
    return InvalidArgument(
        f"inference request to model '{model}' must specify a non-zero or non-empty correlation ID"
    )


def start_error(corrid: CorrelationId, model: str) -> InvalidArgument:
    return InvalidArgument(
        f"inference request for sequence {corrid} to model '{model}' must specify the START flag on the first "
        "request of the sequence"
    )


# -- what the server feeds the model: control inputs and implicit state ------------------------------------------


@dataclass(frozen=True, slots=True)
class Control:
    name: str
    kind: int
    dtype: np.dtype[Any]
    false_true: tuple[Any, Any] = (0, 1)


def controls(config: Any) -> list[Control]:
    found: list[Control] = []
    for control_input in config.sequence_batching.control_input:
        for control in control_input.control:
            if control.kind == _Kind.CONTROL_SEQUENCE_CORRID:
                wire = CONFIG_TO_WIRE[DataType.Name(control.data_type)]
                found.append(Control(control_input.name, control.kind, WIRE_TO_NUMPY[wire]))
            elif len(control.int32_false_true) == 2:
                pair = tuple(control.int32_false_true)
                found.append(Control(control_input.name, control.kind, np.dtype(np.int32), pair))
            elif len(control.fp32_false_true) == 2:
                pair = tuple(control.fp32_false_true)
                found.append(Control(control_input.name, control.kind, np.dtype(np.float32), pair))
            elif len(control.bool_false_true) == 2:
                pair = tuple(control.bool_false_true)
                found.append(Control(control_input.name, control.kind, np.dtype(np.bool_), pair))
    return found


@dataclass(frozen=True, slots=True)
class State:
    input_name: str
    output_name: str
    initial: npt.NDArray[Any]  # one sequence's initial state, batch dimension included for batching models


def states(config: Any, model_dir: Path) -> list[State]:
    found: list[State] = []
    batching = config.max_batch_size > 0
    for state in config.sequence_batching.state:
        wire = CONFIG_TO_WIRE[DataType.Name(state.data_type)]
        if wire == "BYTES":
            raise ModelConfigError(
                f"implicit state '{state.input_name}' of model '{config.name}': TYPE_STRING state is not supported"
            )
        dtype = WIRE_TO_NUMPY[wire]
        dims = [int(d) for d in state.dims]
        data: bytes | None = None
        if state.initial_state:
            initial = state.initial_state[0]
            dims = [int(d) for d in initial.dims]
            if initial.WhichOneof("state_data") == "data_file":
                path = model_dir / "initial_state" / initial.data_file
                try:
                    data = path.read_bytes()
                except OSError as e:
                    raise ModelConfigError(
                        f"failed to read initial state '{initial.data_file}' of model '{config.name}': {e}"
                    ) from e
        # A variable dimension without an initial_state to fix it: one element along it.
        shape = ([1] if batching else []) + [d if d >= 0 else 1 for d in dims]
        count = int(np.prod(shape))
        if data is None:
            array = np.zeros(shape, dtype)
        else:
            if len(data) < count * dtype.itemsize:
                raise ModelConfigError(
                    f"initial_state setting expects {count * dtype.itemsize} bytes, but the data provided from "
                    f"{state.initial_state[0].data_file} only has {len(data)} bytes."
                )
            array = np.frombuffer(data, dtype, count).reshape(shape).copy()
        found.append(State(state.input_name, state.output_name, array))
    return found


def server_fed_inputs(config: Any) -> set[str]:
    """Inputs the sequence batcher feeds (controls and implicit state): never sent by a client."""
    if not config.HasField("sequence_batching"):
        return set()
    batcher = config.sequence_batching
    return {c.name for c in batcher.control_input} | {s.input_name for s in batcher.state}


class SequenceFeed:
    """What the server feeds a stateful model with each request of a sequence: its control inputs and implicit
    state, a row per request (shape [1, 1] for a batching model, [1] otherwise); a padding row for an empty slot;
    and the state a sequence keeps from the model's outputs for its next request."""

    __slots__ = ("batching", "controls", "model", "states")

    def __init__(self, config: Any, model_dir: Path) -> None:
        self.model = str(config.name)
        self.batching = int(config.max_batch_size) > 0
        self.controls = controls(config)
        self.states = states(config, model_dir)

    def inputs(self, inputs: Arrays, corrid: CorrelationId, flags: int, state: Arrays) -> Arrays:
        """A request's inputs with the control and state tensors the server feeds; InvalidArgument when its
        correlation id does not fit the CORRID control's type (that request fails alone)."""
        fed = dict(inputs)
        shape = [1, 1] if self.batching else [1]
        for control in self.controls:
            fed[control.name] = self._control_value(control, corrid, flags, shape)
        fed.update(state)
        return fed

    def _control_value(
        self, control: Control, corrid: CorrelationId, flags: int, shape: list[int]
    ) -> npt.NDArray[Any]:
        kind = control.kind
        if kind == _Kind.CONTROL_SEQUENCE_CORRID:
            if control.dtype == np.object_:
                return np.full(shape, str(corrid).encode(), dtype=object)
            if isinstance(corrid, str):
                raise InvalidArgument(
                    f"sequence batching control '{control.name}' of model '{self.model}' expects a numeric "
                    f"correlation ID, got '{corrid}'"
                )
            info = np.iinfo(control.dtype) if control.dtype.kind in "iu" else None
            if info is not None and not info.min <= corrid <= info.max:
                raise InvalidArgument(
                    f"sequence batching control '{control.name}' of model '{self.model}' is of type "
                    f"{control.dtype}, which cannot hold correlation ID {corrid}"
                )
            return np.full(shape, corrid, dtype=control.dtype)
        if kind == _Kind.CONTROL_SEQUENCE_START:
            on = bool(flags & SEQUENCE_START)
        elif kind == _Kind.CONTROL_SEQUENCE_END:
            on = bool(flags & SEQUENCE_END)
        else:  # READY: every row sent holds a request (empty slots are left out, not padded)
            on = True
        return np.full(shape, control.false_true[1 if on else 0], dtype=control.dtype)

    def null_row(self, like: Arrays) -> Arrays:
        """A padding row for an empty slot, as Triton's null request: the data inputs zeros of a real row's
        shapes, READY (and START, END) false, CORRID 0, the states their initial values."""
        row: Arrays = {}
        for name, array in like.items():
            row[name] = np.full_like(array, b"") if array.dtype == np.object_ else np.zeros_like(array)
        shape = [1, 1] if self.batching else [1]
        for control in self.controls:
            if control.kind == _Kind.CONTROL_SEQUENCE_CORRID:
                row[control.name] = np.full(
                    shape, b"" if control.dtype == np.object_ else 0, dtype=control.dtype
                )
            else:
                row[control.name] = np.full(shape, control.false_true[0], dtype=control.dtype)
        for state in self.states:
            row[state.input_name] = state.initial
        return row

    def keep_state(self, state: Arrays, outputs: Arrays, row: int | None) -> None:
        """A sequence's `state` taken from the model's outputs (its `row` of a batch; None: the outputs whole)."""
        for each in self.states:
            value = outputs.get(each.output_name)
            if value is None:
                continue
            if row is None:
                # The model's output is the next input as it is: no copy, however large the state grows
                # (use_same_buffer_for_input_output, use_growable_memory).
                state[each.input_name] = np.asarray(value, dtype=each.initial.dtype)
            else:
                # A copy of the row: the batch's output buffer must not stay alive for one row of it.
                state[each.input_name] = np.array(value[row : row + 1], dtype=each.initial.dtype)
