"""TritonError and InferenceResponse."""

from __future__ import annotations

import json

import numpy as np
import pytest

from modelhost.backends.python import pb_utils


def test_triton_error_and_response() -> None:
    error = pb_utils.TritonError("bad input")
    assert error.message() == "bad input" and error.code() == pb_utils.TritonError.INTERNAL
    assert (
        pb_utils.TritonError("gone", pb_utils.TritonError.NOT_FOUND).code() == pb_utils.TritonError.NOT_FOUND
    )
    assert pb_utils.TritonError("from the wire", 4).code() == pb_utils.TritonError.UNAVAILABLE
    with pytest.raises(TypeError):
        pb_utils.TritonError("x", 99)
    failed = pb_utils.InferenceResponse(error=error)
    assert failed.has_error() and failed.error() is error and failed.output_tensors() == []
    ok = pb_utils.InferenceResponse(
        [pb_utils.Tensor("O", np.zeros(1))], parameters={"a": 1, "b": True, "c": "x"}
    )
    assert not ok.has_error() and ok.error() is None
    assert json.loads(ok.parameters()) == {"a": 1, "b": True, "c": "x"}
    assert pb_utils.InferenceResponse().parameters() == "{}"
    with pytest.raises(TypeError):
        pb_utils.InferenceResponse([np.zeros(1)])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        pb_utils.InferenceResponse(error="a string")  # type: ignore[arg-type]
    with pytest.raises(pb_utils.TritonModelException, match=r"values to have type bool/int/str"):
        pb_utils.InferenceResponse(parameters={"a": 1.5})  # type: ignore[dict-item]
    exception = pb_utils.TritonModelException("boom")
    assert str(exception) == "boom" and exception.message() == "boom"
