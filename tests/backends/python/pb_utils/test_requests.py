"""InferenceRequest: the server's requests, the BLS constructor's checks, the trace."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from backends.python.pb_utils.fake_runtime import response, server_request
from modelhost.backends.python import pb_utils


def test_server_request_accessors() -> None:
    tensor = pb_utils.Tensor("IN", np.zeros(1, dtype=np.float32))
    request = server_request(key=5, inputs=[tensor])
    assert request.inputs() == [tensor]
    assert request.request_id() == "r1" and request.correlation_id() == 0 and request.flags() == 0
    assert request.requested_output_names() == ["OUT"] and request.timeout() == 0
    assert request.parameters() == '{"p": 1}' and request.model_name() == "m" and request.model_version() == 1
    assert request.trace().get_context() is None
    assert request._server_key() == 5
    assert request._release_flags() == pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL
    request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    assert request._release_flags() == pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE


def test_bls_request_names_may_be_bytes() -> None:
    # As pybind11 in Triton's stub: a model name read from a BYTES input (`as_numpy()[0]`) is bytes.
    request = pb_utils.InferenceRequest(
        model_name=np.array([b"simple"], dtype=np.object_)[0], requested_output_names=[], inputs=[]
    )
    assert request.model_name() == "simple"
    assert pb_utils.InferenceRequest(b"r", 0, [], [], "m").request_id() == "r"
    with pytest.raises(TypeError, match="model_name given as bytes must be UTF-8"):
        pb_utils.InferenceRequest(model_name=b"\xff", requested_output_names=[], inputs=[])


def test_bls_request_constructor() -> None:
    tensor = pb_utils.Tensor("IN", np.zeros(1, dtype=np.float32))
    request = pb_utils.InferenceRequest(
        model_name="add", requested_output_names=["OUT", "OUT"], inputs=[tensor], parameters={"k": "v"}
    )
    assert request.request_id() == "" and request.correlation_id() == 0 and request.model_version() == -1
    assert request.flags() == 0 and request.timeout() == 0 and request._server_key() is None
    assert request.requested_output_names() == ["OUT"]  # Triton keeps a set of names
    assert json.loads(request.parameters()) == {"k": "v"}
    assert (
        pb_utils.InferenceRequest(model_name="a", requested_output_names=[], inputs=[]).parameters() == "{}"
    )
    # A JSON object string is taken as it is.
    assert (
        pb_utils.InferenceRequest(
            model_name="a", requested_output_names=[], inputs=[], parameters='{"x": 1}'
        ).parameters()
        == '{"x": 1}'
    )
    stateful = pb_utils.InferenceRequest(
        "id",
        "corr",
        [tensor],
        ["OUT"],
        "add",
        2,
        pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
        1000,
        pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0),
    )
    assert (stateful.request_id(), stateful.correlation_id(), stateful.model_version()) == ("id", "corr", 2)
    assert (stateful.flags(), stateful.timeout()) == (1, 1000)


def test_bls_request_constructor_errors() -> None:
    with pytest.raises(TypeError, match=r"model_name"):
        pb_utils.InferenceRequest(requested_output_names=[], inputs=[])
    with pytest.raises(
        pb_utils.TritonModelException,
        match=r"^Requested output name for request with id 'r' and model name 'm' should not be empty.$",
    ):
        pb_utils.InferenceRequest(request_id="r", model_name="m", requested_output_names=[""], inputs=[])
    with pytest.raises(
        pb_utils.TritonModelException,
        match=r"^Input tensor for request with id '' and model name 'm' should not be",
    ):
        pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[None])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[np.zeros(1)])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        pb_utils.InferenceRequest(model_name="m", requested_output_names="OUT", inputs=[])
    with pytest.raises(pb_utils.TritonModelException, match=r"^Correlation ID must be integer or string$"):
        pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[], correlation_id=1.5)  # type: ignore[arg-type]
    with pytest.raises(pb_utils.TritonModelException, match=r"keys to have type str"):
        pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[], parameters={1: 2})  # type: ignore[dict-item]
    with pytest.raises(pb_utils.TritonModelException, match=r"^Expect dict"):
        pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[], parameters=[1])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[], timeout=-1)
    with pytest.raises(TypeError):
        pb_utils.PreferredMemory("GPU")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "timestamp"), [("", None), ("X" * 129, None), ("X_START", "soon"), ("X_END", True)]
)
def test_report_activity_refuses_what_the_server_could_not_record(name: str, timestamp: Any) -> None:
    """Checked in the model's process: a bad value never reaches the server's side of the socket."""
    trace = pb_utils.InferenceTrace(None, trace_id=7)
    with pytest.raises(pb_utils.TritonModelException, match=r"report_activity\(\)"):
        trace.report_activity(name, timestamp)


def test_get_tensor_by_name() -> None:
    tensor = pb_utils.Tensor("IN0", np.zeros(2, dtype=np.int32))
    request = server_request(inputs=[tensor])
    assert pb_utils.get_input_tensor_by_name(request, "IN0") is tensor
    assert pb_utils.get_input_tensor_by_name(request, "OPTIONAL_IN") is None  # an optional input not sent
    reply = response()
    assert pb_utils.get_output_tensor_by_name(reply, "OUT") is reply.output_tensors()[0]
    assert pb_utils.get_output_tensor_by_name(reply, "NOPE") is None
