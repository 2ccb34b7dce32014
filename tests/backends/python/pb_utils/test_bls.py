"""BLS through the runtime: exec, a decoupled request's ResponseIterator, async_exec."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from backends.python.pb_utils.fake_runtime import FakeRuntime, response
from modelhost.backends.python import pb_utils


def test_exec_goes_through_the_runtime(runtime: FakeRuntime) -> None:
    request = pb_utils.InferenceRequest(
        model_name="add",
        requested_output_names=["OUT"],
        inputs=[pb_utils.Tensor("IN", np.ones(2))],
        timeout=500,
    )
    answer = response(3)
    runtime.bls_answer = answer
    assert request.exec() is answer
    assert runtime.bls[-1] == (request, False, 500)
    # An error is an answer, not an exception.
    runtime.bls_answer = pb_utils.InferenceResponse(
        error=pb_utils.TritonError("no model", pb_utils.TritonError.NOT_FOUND)
    )
    failed = request.exec()
    assert isinstance(failed, pb_utils.InferenceResponse) and failed.has_error()


def test_decoupled_exec_returns_a_response_iterator(runtime: FakeRuntime) -> None:
    cancels: list[bool] = []

    class Stream:
        def __init__(self) -> None:
            self._items = iter([response(1), response(2)])

        def __iter__(self) -> Stream:
            return self

        def __next__(self) -> pb_utils.InferenceResponse:
            return next(self._items)

        def cancel(self) -> None:
            cancels.append(True)

    runtime.bls_answer = Stream()
    request = pb_utils.InferenceRequest(model_name="gen", requested_output_names=["OUT"], inputs=[])
    responses = request.exec(decoupled=True)
    assert isinstance(responses, pb_utils.ResponseIterator)
    values = [float(r.output_tensors()[0].as_numpy()[0]) for r in responses]
    assert values == [1.0, 2.0]
    assert runtime.bls[-1][1] is True
    # As in Triton, iterating again after the last response replays them.
    assert len(list(responses)) == 2
    responses.cancel()
    assert cancels == [True]


def test_async_exec(runtime: FakeRuntime) -> None:
    answer = response(5)
    runtime.bls_answer = answer
    request = pb_utils.InferenceRequest(model_name="add", requested_output_names=["OUT"], inputs=[])

    async def execute() -> Any:
        first, second = await asyncio.gather(request.async_exec(), request.async_exec())
        return first, second

    assert asyncio.run(execute()) == (answer, answer)
    runtime.bls_answer = iter([answer])

    async def stream() -> Any:
        return await request.async_exec(decoupled=True)

    responses = asyncio.run(stream())
    assert isinstance(responses, pb_utils.ResponseIterator) and list(responses) == [answer]
    with pytest.raises(RuntimeError):
        request.async_exec()  # as in Triton: only inside a coroutine


def test_bls_without_runtime() -> None:
    request = pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[])
    with pytest.raises(pb_utils.TritonModelException, match=r"no Triton runtime is installed"):
        request.exec()
