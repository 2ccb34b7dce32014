"""A request's inputs checked against the config: the one-pass check of the common case (every input required,
none reshaped, each sent once and right) gives what the checks in Triton's order give, and leaves every faulty
request to them, so that it is refused with Triton's words."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import modelhost
from modelhost.engine.registry.entries import LoadSettings
from modelhost.engine.registry.registry import ModelRegistry
from modelhost.engine.request_checks import RequestChecks
from modelhost.errors import InvalidArgument
from modelhost.repository.sources import open_repository
from modelhost.types import InferenceRequest, RequestedOutput, Tensor

EXAMPLES = Path(modelhost.__file__).parent / "examples"


@pytest.fixture(scope="module")
def simple(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RequestChecks]:
    """The checks of the example `simple`: INPUT0 and INPUT1, INT32 [16], max_batch_size 8."""
    repo = tmp_path_factory.mktemp("repo")
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    registry = ModelRegistry([open_repository(str(repo))], LoadSettings())
    asyncio.run(registry.start())
    try:
        yield registry.get("simple").checks
    finally:
        registry.close()


def _tensor(name: str, shape: list[int], datatype: str = "INT32") -> Tensor:
    dtype = np.int32 if datatype == "INT32" else np.float32
    return Tensor(name, datatype, shape, np.zeros(shape, dtype=dtype))


def _request(*inputs: Tensor) -> InferenceRequest:
    return InferenceRequest("simple", inputs=list(inputs))


def _full_checks(checks: RequestChecks, request: InferenceRequest) -> tuple[dict[str, object], int]:
    """The checks in Triton's order alone, without the one-pass check."""
    checks.plain = False
    try:
        return checks.inputs_of(request)  # type: ignore[return-value]
    finally:
        checks.plain = True


def test_a_well_formed_request_passes_in_one_pass(simple: RequestChecks) -> None:
    assert simple.plain
    for rows in (1, 3, 8):
        request = _request(_tensor("INPUT1", [rows, 16]), _tensor("INPUT0", [rows, 16]))
        assert simple._plain_inputs(request) is not None
        arrays, batch = simple.inputs_of(request)
        assert batch == rows and list(arrays) == ["INPUT1", "INPUT0"]
        assert all(arrays[t.name] is t.data for t in request.inputs)
        assert (arrays, batch) == _full_checks(simple, request)


@pytest.mark.parametrize(
    "inputs",
    [
        [_tensor("INPUT0", [1, 16]), _tensor("INPUT0", [1, 16])],  # sent twice
        [_tensor("INPUT0", [1, 16]), _tensor("OTHER", [1, 16])],  # unknown
        [_tensor("INPUT0", [1, 16])],  # one missing
        [_tensor("INPUT0", [1, 16]), _tensor("INPUT1", [2, 16])],  # batch sizes differ
        [_tensor("INPUT0", [9, 16]), _tensor("INPUT1", [9, 16])],  # past max_batch_size
        [_tensor("INPUT0", [1, 16]), _tensor("INPUT1", [1, 16], "FP32")],  # wrong type
        [_tensor("INPUT0", [1, 15]), _tensor("INPUT1", [1, 16])],  # wrong shape
        [_tensor("INPUT0", []), _tensor("INPUT1", [1, 16])],  # no batch dimension
    ],
    ids=["twice", "unknown", "missing", "batches differ", "too large", "type", "shape", "no batch"],
)
def test_a_faulty_request_gets_the_error_of_the_full_checks(
    simple: RequestChecks, inputs: list[Tensor]
) -> None:
    request = _request(*inputs)
    assert simple._plain_inputs(request) is None
    with pytest.raises(InvalidArgument) as full:
        _full_checks(simple, request)
    with pytest.raises(InvalidArgument) as error:
        simple.inputs_of(request)
    assert str(error.value) == str(full.value)


@pytest.mark.parametrize(
    ("outputs", "message"),
    [
        ([RequestedOutput("NOPE")], "unexpected inference output 'NOPE' for model 'simple'"),
        (
            [RequestedOutput("OUTPUT0"), RequestedOutput("OUTPUT0")],
            "[request id: <id_unknown>] output 'OUTPUT0' is requested more than once",
        ),
        (
            [RequestedOutput("OUTPUT0", classification=-1)],
            "invalid value for 'classification' parameter of output 'OUTPUT0', expected >= 0",
        ),
    ],
    ids=["unknown", "twice", "classification"],
)
def test_requested_outputs_are_checked_in_tritons_words(
    simple: RequestChecks, outputs: list[RequestedOutput], message: str
) -> None:
    assert simple.output_names(InferenceRequest("simple")) == ["OUTPUT0", "OUTPUT1"]  # none asked: all
    assert simple.output_names(InferenceRequest("simple", outputs=[RequestedOutput("OUTPUT1")])) == ["OUTPUT1"]
    with pytest.raises(InvalidArgument) as error:
        simple.output_names(InferenceRequest("simple", outputs=outputs))
    assert str(error.value) == message
