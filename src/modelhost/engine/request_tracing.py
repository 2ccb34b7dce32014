"""The engine's part of a request's trace (the trace extension): a trace begun for a request a frontend received,
the model's stamps and tensors, and the frontend's send window once the answer went out."""

from __future__ import annotations

import time

from modelhost.engine_api import RECEIVE_ACTIVITIES, SEND_ACTIVITIES, CallContext
from modelhost.observability.tracing.tracer import Trace, Tracer
from modelhost.types import InferenceRequest


def start_trace(tracer: Tracer, request: InferenceRequest, context: CallContext) -> Trace | None:
    """A trace for this request when tracing samples it, with the frontend's receive window."""
    trace = tracer.start(request.model_name, request.model_version, request.id, context.parent())
    if trace is None:
        return None
    request.trace = trace
    trace.protocol = context.protocol
    start, end = RECEIVE_ACTIVITIES[context.protocol]
    trace.stamp(start, context.received_ns)
    trace.stamp(end)
    return trace


def trace_queued(trace: Trace, version: str, request: InferenceRequest) -> int:
    """The request reaches the model `version` that serves it: its inputs as queued; when that was."""
    trace.model_version = version
    for tensor in request.inputs:
        trace.tensor("TENSOR_QUEUE_INPUT", tensor.name, tensor.datatype, tensor.data)
    return time.monotonic_ns()


def trace_sent(tracer: Tracer, request: InferenceRequest, send_started_ns: int, last: bool) -> None:
    """A frontend sent (a response of) the request's answer: its send window; the trace ends with the last."""
    trace = request.trace
    if trace is None or not trace.protocol:
        return
    start, end = SEND_ACTIVITIES[trace.protocol]
    trace.stamp(start, send_started_ns)
    trace.stamp(end)
    if last:
        tracer.finish(trace)
