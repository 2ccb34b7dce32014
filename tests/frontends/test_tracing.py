"""The frontends' trace hand-off: a traced request's answer is encoded within `sending`, which tells the engine
when the send began and whether it ends the trace; an untraced one costs nothing."""

from __future__ import annotations

import pytest

from fake_engine import MODEL, FakeEngine
from modelhost.frontends.tracing import sending
from modelhost.types import InferenceRequest


def test_an_untraced_request_tells_the_engine_nothing() -> None:
    engine = FakeEngine()
    with sending(engine, InferenceRequest(MODEL)):
        pass
    assert engine.sent_calls == []
    assert sending(engine, InferenceRequest(MODEL)) is sending(engine, InferenceRequest("other"))  # shared


def test_a_traced_request_tells_the_engine_when_its_send_began() -> None:
    engine = FakeEngine()
    request = InferenceRequest(MODEL)
    request.trace = object()
    with sending(engine, request):
        assert engine.sent_calls == []  # told once the answer is out
    with sending(engine, request, last=False):  # one answer of a stream
        pass
    (first, second) = engine.sent_calls
    assert first[0] == MODEL and first[1] > 0 and first[2] is True
    assert second[2] is False and second[1] >= first[1]


def test_a_failed_encoding_is_told_too() -> None:
    engine = FakeEngine()
    request = InferenceRequest(MODEL)
    request.trace = object()
    with pytest.raises(ValueError, match="cannot encode"), sending(engine, request):
        raise ValueError("cannot encode")
    assert len(engine.sent_calls) == 1
