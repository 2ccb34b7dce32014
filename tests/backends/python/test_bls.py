"""What a python model tells the server, served on its side: log lines at the model's level and call site, custom
metrics by the stub's ids (a value asked for is answered), trace activities; errors by Triton's codes."""

from __future__ import annotations

import logging

import pytest

from backends.python.stub_side import stub_without_process, written
from modelhost.backends.api import BackendServices
from modelhost.backends.python.bls import ERRORS_BY_CODE, ModelCalls, error_code
from modelhost.errors import Cancelled, InternalError, InvalidArgument, ModelConfigError, NotFound


def calls() -> ModelCalls:
    return ModelCalls("m_0", BackendServices(), 30)


def test_error_codes_are_tritons_both_ways() -> None:
    for code, error in ERRORS_BY_CODE.items():
        assert error_code(error("x")) == code
    assert error_code(NotFound("x")) == 2 and error_code(Cancelled("x")) == 7
    assert error_code(ModelConfigError("x")) == error_code(InvalidArgument("x")) == 3  # by its nearest kind
    assert error_code(InternalError("x")) == 1


def test_log_lines_keep_the_models_level_and_call_site(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="modelhost.python"):
        for level in ("INFO", "WARNING", "ERROR", "VERBOSE"):
            calls().on_log({"level": level, "message": "hi", "file": "/models/m/1/model.py", "line": 12})
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "model.py:12: hi"),
        (logging.WARNING, "model.py:12: hi"),
        (logging.ERROR, "model.py:12: hi"),
        (logging.DEBUG, "model.py:12: hi"),
    ]


def test_metrics_by_the_stubs_ids(caplog: pytest.LogCaptureFixture) -> None:
    model = calls()
    with stub_without_process() as (stub, _):
        model.on_metric(stub, {"op": "metric_family", "name": "n", "description": "N", "kind": "COUNTER"})
        model.on_metric(stub, {"op": "metric", "metric": 5, "family": "n", "labels": {}, "buckets": None})
        model.on_metric(stub, {"op": "metric_update", "metric": 5, "update": "increment", "value": 2.0})
        model.on_metric(stub, {"op": "metric_value", "metric": 5, "id": 9})
        assert written(stub) == [{"op": "reply", "id": 9, "value": 2.0}]
        with caplog.at_level(logging.ERROR, logger="modelhost.python"):
            model.on_metric(stub, {"op": "metric_family", "name": "n", "description": "N", "kind": "GAUGE"})
    assert "model instance 'm_0': metric family 'n' already exists as a counter" in caplog.text


def test_trace_activities_go_to_a_running_requests_trace() -> None:
    stamped: list[tuple[str, int]] = []

    class Trace:
        def stamp(self, name: str, ns: int) -> None:
            stamped.append((name, ns))

    model = calls()
    model.traces[4] = Trace()
    model.on_trace_activity({"trace": 4, "name": "X_START", "ns": 10})
    model.on_trace_activity({"trace": 5, "name": "X_END", "ns": 20})  # a request that has ended: ignored
    assert stamped == [("X_START", 10)]
