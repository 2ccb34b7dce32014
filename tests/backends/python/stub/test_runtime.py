"""The stub's runtime: a default-mode model's sent response waits for the execute's reply; a decoupled model's
responses go at once; cancellations the server sent are seen by the model."""

from __future__ import annotations

from typing import Any

from backends.python.stub.server_end import ServerEnd, floats
from modelhost.backends.python import pb_utils


class _SendsThroughItsSender:
    def __init__(self) -> None:
        self.cancelled: list[bool] = []

    def execute(self, requests: list[pb_utils.InferenceRequest]) -> None:
        for request in requests:
            self.cancelled.append(request.is_cancelled())
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            assert tensor is not None
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", tensor.as_numpy() * 2)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def test_a_default_mode_response_goes_with_the_execute_reply() -> None:
    server = ServerEnd(_SendsThroughItsSender())
    try:
        server.execute(floats(1.5))
        reply = server.next_message()
        assert reply["op"] == "executed" and reply["error"] is None
        assert server.outputs(reply["responses"][0])["OUTPUT0"].tolist() == [[3.0]]
        assert server.stub.executor.sent == {}  # forgotten once replied
    finally:
        server.close()


def test_decoupled_responses_go_at_once_and_cancellation_is_read() -> None:
    model = _SendsThroughItsSender()
    server = ServerEnd(model, decoupled=True)
    try:
        server.send({"op": "cancel", "key": 2})
        server.execute(floats(1), floats(2), key=1)
        messages: list[dict[str, Any]] = [server.next_message() for _ in range(5)]
    finally:
        server.close()
    assert model.cancelled == [False, True]
    responses = [m for m in messages if m["op"] == "response"]
    assert [(m["key"], m["flags"]) for m in responses] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert server.outputs(responses[2]["response"])["OUTPUT0"].tolist() == [[4.0]]
    assert responses[1]["response"] is None
    assert messages[-1]["op"] == "executed" and messages[-1]["responses"] is None
