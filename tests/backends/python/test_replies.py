"""What a stub answers, read on the server: outcomes per request, outputs checked as Triton's python backend
passes them on, a decoupled model's responses to their sinks, the stub's blocks given back."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from backends.python.stub_side import stub_without_process, written
from modelhost.backends.api import Job, Outputs, Rescheduled, ResponseSink
from modelhost.backends.python.ipc import Arena, put_tensor
from modelhost.backends.python.process import FREES_PER_MESSAGE
from modelhost.backends.python.replies import ReplyReader, with_parameters
from modelhost.datatypes import WIRE_TO_NUMPY
from modelhost.errors import InternalError, NotFound
from modelhost.io_specs import TensorSpec

OUT = TensorSpec("OUT", "FP32", WIRE_TO_NUMPY["FP32"], (4,), None)
RESHAPED = TensorSpec("OUT", "FP32", WIRE_TO_NUMPY["FP32"], (2, 2), (4,))


def reader(
    spec: TensorSpec = OUT, max_batch_size: int = 0, decoupled: bool = False, iterative: bool = False
) -> ReplyReader:
    return ReplyReader("m", {"OUT": spec}, max_batch_size, decoupled, iterative)


def response(arena: Arena, array: Any, **fields: Any) -> dict[str, Any]:
    return {"outputs": [put_tensor(arena, "OUT", np.asarray(array))], "error": None, "parameters": "{}", **fields}


def job(*outputs: str) -> Job:
    return Job({}, list(outputs or ["OUT"]), 1)


def test_each_job_gets_its_requested_outputs() -> None:
    with stub_without_process() as (stub, arena):
        replied = {"responses": [response(arena, np.ones(4, np.float32)), response(arena, np.zeros(4, np.float32))]}
        first, second = reader().outcomes(stub, [job(), job("OTHER")], [1, 2], replied)
    assert isinstance(first, dict) and first["OUT"].tolist() == [1.0] * 4
    assert second == {}  # an output not requested is dropped


def test_a_failed_execute_fails_every_job_and_forgets_their_sinks() -> None:
    with stub_without_process() as (stub, _):
        stub.sinks[1] = ResponseSink()
        outcomes = reader().outcomes(stub, [job(), job()], [1, 2], {"error": "boom"})
        assert all(isinstance(o, InternalError) and str(o) == "boom" for o in outcomes)
        assert stub.sinks == {}


def test_an_error_response_keeps_its_code_and_no_response_is_an_error() -> None:
    with stub_without_process() as (stub, _):
        replied = {"responses": [{"outputs": [], "error": ("gone", 2)}, None]}
        missing, none = reader().outcomes(stub, [job(), job()], [1, 2], replied)
    assert isinstance(missing, NotFound) and str(missing) == "gone"
    assert isinstance(none, InternalError) and "returned no response for the request" in str(none)


def test_a_rescheduled_request_runs_again_only_in_an_iterative_sequence() -> None:
    with stub_without_process() as (stub, _):
        assert reader(iterative=True).outcomes(stub, [job()], [1], {"rescheduled": [0]}) == [Rescheduled()]
        sink = ResponseSink()
        stub.sinks[1] = sink
        (refused,) = reader().outcomes(stub, [job()], [1], {"rescheduled": [0]})
        assert isinstance(refused, InternalError) and "iterative_sequence: true" in str(refused)
        assert sink.finished


def test_an_output_must_fit_the_shape_its_config_reshapes_it_to() -> None:
    with stub_without_process() as (stub, arena):
        fitting = {"responses": [response(arena, np.zeros(4, np.float32))]}
        (fits,) = reader(RESHAPED).outcomes(stub, [job()], [1], fitting)
        assert not isinstance(fits, BaseException)
        (misshapen,) = reader(RESHAPED).outcomes(
            stub, [job()], [1], {"responses": [response(arena, np.zeros(3, np.float32))]}
        )
        assert isinstance(misshapen, InternalError)
        assert "of shape [3], which does not fit the shape its configuration reshapes it to, [2,2]" in str(misshapen)


def test_an_output_of_a_type_triton_lacks_is_refused() -> None:
    refused = reader()._check_outputs(job(), {"OUT": np.zeros(4, np.complex64)})
    assert isinstance(refused, InternalError) and "which has no Triton data type" in str(refused)


def test_decoupled_responses_go_to_their_sink_and_blocks_go_back() -> None:
    with stub_without_process() as (stub, arena):
        sink = ResponseSink()
        stub.sinks[7] = sink
        big = np.arange(1024, dtype=np.float32)  # in shared memory, not in the message
        responses = reader(decoupled=True)
        responses.on_response(stub, {"key": 7, "flags": 0, "response": response(arena, big)})
        assert len(stub.frees) == 1
        responses.on_response(stub, {"key": 7, "flags": 1, "response": None})
        assert 7 not in stub.sinks and sink.finished
        items = [sink._queue.get_nowait() for _ in range(2)]
        assert items[0].outputs is not None and np.array_equal(items[0].outputs["OUT"], big)
        assert (items[1].outputs, items[1].final) == (None, True)
        # Past FREES_PER_MESSAGE blocks, they go back on their own.
        for _ in range(FREES_PER_MESSAGE - 1):  # one is waiting already
            responses.on_response(stub, {"key": 8, "flags": 0, "response": response(arena, big)})
        assert written(stub)[-1]["op"] == "free" and stub.frees == []


@pytest.mark.parametrize(
    ("text", "parameters"),
    [
        ('{"a": 1, "b": true, "c": "x", "d": 1.5}', {"a": 1, "b": True, "c": "x", "d": 1.5}),
        ('{"big": 18446744073709551615, "list": [1]}', None),
        ("{}", None),
    ],
)
def test_response_parameters_that_both_protocols_carry(text: str, parameters: dict[str, Any] | None) -> None:
    arrays = {"OUT": np.ones(1)}
    given = with_parameters(arrays, {"parameters": text})
    if parameters is None:
        assert given is arrays
    else:
        assert isinstance(given, Outputs) and given.parameters == parameters
