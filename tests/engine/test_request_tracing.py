"""The engine's part of a request's trace (engine/request_tracing.py): begun for a request a frontend received, the
model's stamps, the frontend's send window, the end of the trace."""

from __future__ import annotations

import numpy as np

from modelhost.engine.request_tracing import start_trace, trace_queued, trace_sent
from modelhost.engine_api import CallContext
from modelhost.observability.tracing.tracer import Trace, Tracer
from modelhost.options.trace import TraceSettings
from modelhost.types import InferenceRequest, Tensor


class ListSink:
    def __init__(self) -> None:
        self.traces: list[Trace] = []

    def add(self, trace: Trace) -> None:
        self.traces.append(trace)

    def close(self) -> None:
        pass


def test_a_sampled_request_is_traced_from_its_receipt_to_its_last_send() -> None:
    sink = ListSink()
    tracer = Tracer(TraceSettings(("TIMESTAMPS", "TENSORS"), rate=1, file="/tmp/x"), sink)
    data = np.arange(3, dtype=np.float32)
    request = InferenceRequest("m", "", "r1", [Tensor("X", "FP32", [3], data)])
    trace = start_trace(tracer, request, CallContext("HTTP", 5))
    assert trace is not None and request.trace is trace and trace.protocol == "HTTP"
    assert [name for name, _ in trace.timestamps] == ["HTTP_RECV_START", "HTTP_RECV_END"]
    assert trace.timestamps[0][1] == 5
    assert trace_queued(trace, "2", request) > 0
    assert trace.model_version == "2" and [t[:3] for t in trace.tensors] == [("TENSOR_QUEUE_INPUT", "X", "FP32")]
    trace_sent(tracer, request, 7, last=False)
    assert sink.traces == []  # more responses to come
    trace_sent(tracer, request, 9, last=True)
    assert sink.traces == [trace]
    sends = [(name, ns) for name, ns in trace.timestamps if name.startswith("HTTP_SEND")]
    assert [name for name, _ in sends] == ["HTTP_SEND_START", "HTTP_SEND_END"] * 2 and sends[2][1] == 9


def test_an_untraced_request_leaves_no_trace() -> None:
    tracer = Tracer(TraceSettings(("TIMESTAMPS",), rate=2, file="/tmp/x"), ListSink())
    first, second = InferenceRequest("m"), InferenceRequest("m")
    assert start_trace(tracer, first, CallContext("GRPC", 0)) is not None
    assert start_trace(tracer, second, CallContext("GRPC", 0)) is None and second.trace is None
    trace_sent(tracer, second, 1, last=True)  # nothing to stamp or end
