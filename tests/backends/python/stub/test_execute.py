"""The stub's execute calls: requests in, the model's responses out, and Triton's rules on what execute returns."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from backends.python.stub.server_end import Identity, ServerEnd, floats
from modelhost.backends.python import pb_utils


@pytest.fixture
def identity() -> Iterator[ServerEnd]:
    server = ServerEnd(Identity())
    try:
        yield server
    finally:
        server.close()


def test_each_request_gets_its_response(identity: ServerEnd) -> None:
    identity.execute(floats(1, 2), floats(3, 4))
    reply = identity.next_message()
    assert reply["op"] == "executed" and reply["id"] == 101 and reply["error"] is None
    outputs = [identity.outputs(r)["OUTPUT0"] for r in reply["responses"]]
    assert [o.tolist() for o in outputs] == [[[1.0, 2.0]], [[3.0, 4.0]]]
    assert [r["error"] for r in reply["responses"]] == [None, None]
    assert [r["parameters"] for r in reply["responses"]] == ["{}", "{}"]


class _Returns:
    def __init__(self, returned: Any) -> None:
        self.returned = returned

    def execute(self, requests: list[pb_utils.InferenceRequest]) -> Any:
        return self.returned


@pytest.mark.parametrize(
    ("returned", "words"),
    [
        ("text", "Expected a list in the execute return, received type 'str'."),
        ([], "InferenceRequest(s) size is:1, and InferenceResponse(s) size is:0"),
        ([5], "Expected an 'InferenceResponse' object in the execute function return list, found type 'int'."),
    ],
)
def test_a_broken_execute_contract_is_said_in_tritons_words(returned: Any, words: str) -> None:
    server = ServerEnd(_Returns(returned))
    try:
        server.execute(floats(1))
        reply = server.next_message()
    finally:
        server.close()
    assert reply["error"].startswith("Failed to process the request(s) for model 'm', message: ")
    assert words in reply["error"]


def test_a_decoupled_execute_must_return_none() -> None:
    server = ServerEnd(_Returns([]), decoupled=True)
    try:
        server.execute(floats(1))
        reply = server.next_message()
    finally:
        server.close()
    assert "is using the decoupled mode and the execute function must return None." in reply["error"]


def test_an_error_response_carries_its_code(identity: ServerEnd) -> None:
    response = pb_utils.InferenceResponse(error=pb_utils.TritonError("no", pb_utils.TritonError.NOT_FOUND))
    assert identity.stub.executor.describe(response) == {"outputs": [], "error": ("no", 2), "parameters": "{}"}
    bls_output = identity.stub.executor.describe(pb_utils.InferenceResponse([pb_utils.Tensor("O", np.ones(1))]))
    assert len(bls_output["outputs"]) == 1
