"""The verbose request log (engine/request_log.py), in Triton's words, under the logger `modelhost.server`."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest

from modelhost.engine.model import LoadedModel
from modelhost.engine.request_log import log_received, log_succeeded
from modelhost.observability.stats import RequestTiming
from modelhost.types import InferenceRequest, RequestedOutput, Tensor

MODEL = cast(LoadedModel, SimpleNamespace(name="m", version_str="3"))


def test_a_request_and_its_success_as_the_verbose_log_shows_them(caplog: pytest.LogCaptureFixture) -> None:
    request = InferenceRequest(
        "m",
        "",
        "r1",
        [Tensor("X", "FP32", [1, 2], np.zeros((1, 2), np.float32))],
        [RequestedOutput("Y")],
        {"sequence_id": 4, "other": 1},
        priority=2,
    )
    with caplog.at_level(logging.DEBUG, logger="modelhost.server"):
        log_received(request, MODEL)
        log_succeeded(request, MODEL, 12_345_000, RequestTiming(queue_ns=2_000_000, infer_ns=3_000_000))
    received, succeeded = (r.getMessage() for r in caplog.records if r.name == "modelhost.server")
    assert received == (
        "[request id: r1] request for model 'm', requested version -1, actual version 3, priority 2, "
        "timeout (us) 0, {'sequence_id': 4}; inputs: X FP32 [1,2]; outputs: Y"
    )
    assert succeeded == (
        "[request id: r1] request for model 'm' version 3 succeeded in 12345 us (queue 2000 us, compute 3000 us)"
    )
