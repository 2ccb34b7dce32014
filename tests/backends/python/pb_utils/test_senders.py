"""The response sender and Triton's rules on what it may send."""

from __future__ import annotations

import pytest

from backends.python.pb_utils.fake_runtime import FakeRuntime, response, server_request
from modelhost.backends.python import pb_utils


def test_decoupled_sender(runtime: FakeRuntime) -> None:
    request = server_request(key=3, decoupled=True)
    sender = request.get_response_sender()
    assert sender is request.get_response_sender()
    first, second = response(1), response(2)
    sender.send(first)
    sender.send(second)
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert runtime.sent == [(3, first, 0), (3, second, 0), (3, None, 1)]
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Unable to send response. Response sender has been closed.$"
    ):
        sender.send(response())
    assert sender._is_closed()


def test_sender_argument_checks(runtime: FakeRuntime) -> None:
    sender = server_request(decoupled=True).get_response_sender()
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Unable to send response. Unsupported flag provided.$"
    ):
        sender.send(response(), flags=2)
    with pytest.raises(
        pb_utils.TritonModelException,
        match=r"^Inference Response object must be provided when the response flags is set to zero.$",
    ):
        sender.send()
    with pytest.raises(TypeError):
        sender.send([response()])  # type: ignore[arg-type]
    assert runtime.sent == []
    # A final response closes the sender.
    sender.send(response(), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    with pytest.raises(pb_utils.TritonModelException, match=r"closed"):
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def test_default_mode_sender_sends_exactly_one_response(runtime: FakeRuntime) -> None:
    sender = server_request(decoupled=False).get_response_sender()
    with pytest.raises(
        pb_utils.TritonModelException,
        match=r"^Unable to send response. Non-decoupled model cannot send complete final before sending a response.$",
    ):
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    sender.send(response())
    with pytest.raises(
        pb_utils.TritonModelException,
        match=r"^Unable to send response. Non-decoupled model cannot send more than one response.$",
    ):
        sender.send(response())
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert [flags for _, _, flags in runtime.sent] == [0, 1]
    # What the stub does with a response that execute() returns after the sender already sent one.
    other = server_request(decoupled=False).get_response_sender()
    other.send(response(), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    with pytest.raises(pb_utils.TritonModelException):
        other._update_state(response(), pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def test_sender_of_a_bls_request_and_without_runtime() -> None:
    bls = pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[])
    with pytest.raises(
        pb_utils.TritonModelException, match=r"no reference to the decoupled state of the model"
    ):
        bls.get_response_sender().send(response())
    assert bls.is_cancelled() is False
    sender = server_request(decoupled=True).get_response_sender()
    with pytest.raises(pb_utils.TritonModelException, match=r"no Triton runtime is installed"):
        sender.send(response())
    assert sender._responses_sent() == 0  # a refused send does not count


def test_cancellation_goes_to_the_runtime(runtime: FakeRuntime) -> None:
    request = server_request(key=9, decoupled=True)
    assert not request.is_cancelled() and not request.get_response_sender().is_cancelled()
    runtime.cancelled.add(9)
    assert request.is_cancelled() and request.get_response_sender().is_cancelled()
