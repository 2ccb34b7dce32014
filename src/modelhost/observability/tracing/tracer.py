"""Which requests are traced, and what a trace holds; the traces go to a sink (sinks.py) when they end.

Sampling as Triton does it: per scope (the global settings, or a model with its own settings), one request of
every `rate` is traced, while `count` lasts (-1: forever; each trace taken lowers it, and the API shows what is
left). A request that is not traced costs one counter step: nothing is recorded for it.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from modelhost.errors import InvalidArgument
from modelhost.options.trace import TraceSettings, apply, parse_update

log = logging.getLogger("modelhost.tracing")


@dataclass(slots=True)
class Trace:
    id: int
    model_name: str
    model_version: str
    request_id: str
    settings: TraceSettings
    parent_id: int = 0
    # W3C trace context of the client's request (`traceparent` header or gRPC metadata), for OpenTelemetry.
    traceparent: str = ""
    last: bool = False  # the last trace `count` allows
    ensemble: bool = False  # an ensemble's request: its steps compute, it does not (no compute span)
    # The frontend protocol a request came by ("HTTP", "GRPC"): its receive and send activities' names.
    protocol: str = ""
    # The request's RequestTiming once the model has accepted its inputs (set by the model): how far a request
    # that failed got (queued, executing), for its timestamps.
    timing: Any = None
    timestamps: list[tuple[str, int]] = field(default_factory=list)
    # level TENSORS: (activity, name, datatype, shape, data as a list)
    tensors: list[tuple[str, str, str, Any]] = field(
        default_factory=list
    )  # (activity, name, datatype, array)
    nbytes: int = 512  # about what the trace holds, for the sink's memory bound

    def stamp(self, name: str, ns: int | None = None) -> None:
        """A point in the request's life, on the steady clock (`time.monotonic_ns`), as Triton records them."""
        self.timestamps.append((name, time.monotonic_ns() if ns is None else ns))

    def tensor(self, activity: str, name: str, datatype: str, data: Any) -> None:
        """At level TENSORS: a tensor as the request had it (TENSOR_QUEUE_INPUT) or answered (TENSOR_BACKEND_OUTPUT)."""
        if self.settings.tensors:
            # A copy (the request's buffer, or a shared-memory region, may be reused); turned into text by the sink,
            # off the event loop.
            array = np.array(data, copy=True)
            self.tensors.append((activity, name, datatype, array))
            self.nbytes += array.nbytes


def _sampled(traceparent: str) -> bool:
    """W3C trace context: version-traceid-parentid-flags, the lowest flag bit "sampled"."""
    parts = traceparent.split("-")
    try:
        return len(parts) == 4 and bool(int(parts[3], 16) & 1)
    except ValueError:
        return False


def stamp_request(trace: Trace, started_ns: int, timing: Any, ended_ns: int) -> None:
    """The core's timestamps of a traced request, from where it spent its time (`RequestTiming`): the request
    start and end are read off the clock; the points in between are placed by the measured durations (input
    checks, queue, execution, outputs), which is what the scheduler records for every request anyway."""
    queue_start = min(started_ns + timing.input_ns, ended_ns)
    compute_start = min(queue_start + timing.queue_ns, ended_ns)
    output_start = min(compute_start + timing.infer_ns, ended_ns)
    compute_end = min(output_start + timing.output_ns, ended_ns)
    # The response is complete when it leaves the scheduler: with preserve_ordering, once the answers of the
    # requests before it have (Triton's L0_batcher verify_timestamps checks it so).
    response_complete = min(compute_end + timing.held_ns, ended_ns)
    for name, ns in (
        ("REQUEST_START", started_ns),
        ("QUEUE_START", queue_start),
        ("COMPUTE_START", compute_start),
        ("COMPUTE_INPUT_END", compute_start),
        ("COMPUTE_OUTPUT_START", output_start),
        ("INFER_RESPONSE_COMPLETE", response_complete),
        ("COMPUTE_END", compute_end),
        ("REQUEST_END", ended_ns),
    ):
        trace.stamp(name, ns)


def stamp_failed_request(trace: Trace, started_ns: int, ended_ns: int) -> None:
    """The timestamps of a traced request that failed or was cancelled, as far as it got: QUEUE_START once the
    model accepted its inputs, the COMPUTE_* points once an instance took it (its compute span, as Triton's
    backends record it for a request cancelled while executing)."""
    trace.stamp("REQUEST_START", started_ns)
    timing = trace.timing
    if timing is not None:
        queue_start = min(started_ns + timing.input_ns, ended_ns)
        trace.stamp("QUEUE_START", queue_start)
        if timing.queue_ns > 0:
            compute_start = min(queue_start + timing.queue_ns, ended_ns)
            output_start = min(compute_start + timing.infer_ns, ended_ns) if timing.infer_ns else ended_ns
            for name, ns in (
                ("COMPUTE_START", compute_start),
                ("COMPUTE_INPUT_END", compute_start),
                ("COMPUTE_OUTPUT_START", output_start),
                ("COMPUTE_END", ended_ns),
            ):
                trace.stamp(name, ns)
    trace.stamp("REQUEST_END", ended_ns)


class TraceSink(Protocol):
    def add(self, trace: Trace) -> None: ...

    def close(self) -> None: ...


class Tracer:
    def __init__(self, settings: TraceSettings, sink: TraceSink | None) -> None:
        self.startup = settings  # what a global setting reset to null goes back to, as in Triton
        self.global_settings = settings
        self.sink = sink
        self.model_overrides: dict[str, dict[str, Any]] = {}
        self._samples: dict[str, int] = {}  # per scope ("" = global): requests seen
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # settings change from the event loop, sinks may write from a thread
        self.enabled = settings.on and sink is not None

    # -- settings (the trace API) ------------------------------------------------------------------------------

    def settings_for(self, model: str = "") -> TraceSettings:
        override = self.model_overrides.get(model) if model else None
        return apply(self.global_settings, override) if override else self.global_settings

    def update(self, body: Any, model: str = "") -> TraceSettings:
        """Apply a POST of the trace API (global, or for one model); refused whole when anything is wrong."""
        changes = parse_update(body)
        would = apply(self.settings_for(model), changes, self.startup)
        if would.on and would.mode == "triton" and not would.file:
            raise InvalidArgument("Attempting to set invalid trace setting :trace file name is not given")
        if model:
            override = {**self.model_overrides.get(model, {}), **changes}
            override = {k: v for k, v in override.items() if v is not None}  # null: back to the global value
            if override:
                self.model_overrides[model] = override
            else:
                self.model_overrides.pop(model, None)
            self._samples.pop(model, None)
        else:
            self.global_settings = apply(self.global_settings, changes, self.startup)
        self.enabled = self.sink is not None and (
            self.global_settings.on or any(self.settings_for(m).on for m in self.model_overrides)
        )
        return self.settings_for(model)

    # -- sampling ----------------------------------------------------------------------------------------------

    def start(
        self, model_name: str, model_version: str, request_id: str, traceparent: str = ""
    ) -> Trace | None:
        """A trace for this request, or None when it is not sampled."""
        if not self.enabled:
            return None
        scope = model_name if model_name in self.model_overrides else ""
        settings = self.settings_for(scope)
        if not settings.on:
            return None
        # As Triton in opentelemetry mode: a caller's trace context marked sampled is traced whatever the rate.
        forced = settings.mode == "opentelemetry" and _sampled(traceparent)
        if not forced:
            seen = self._samples.get(scope, 0)
            self._samples[scope] = seen + 1
            if seen % settings.rate:
                return None
        trace = Trace(
            next(self._ids), model_name, model_version, request_id, settings, traceparent=traceparent
        )
        if settings.count > 0:
            self._take_one(scope, settings.count - 1)
            trace.last = settings.count == 1  # Triton writes the traces out as soon as the count runs out
        return trace

    def child(self, parent: Trace, model_name: str, model_version: str) -> Trace:
        """The trace of a request made for a traced one (an ensemble's step): traced too, its `parent_id` the
        parent's id, as Triton spawns child traces."""
        return Trace(
            next(self._ids),
            model_name,
            model_version,
            parent.request_id,
            parent.settings,
            parent_id=parent.id,
            traceparent=parent.traceparent,
        )

    def _take_one(self, scope: str, left: int) -> None:
        if scope:
            self.model_overrides[scope] = {**self.model_overrides[scope], "count": left}
        else:
            self.global_settings = apply(self.global_settings, {"count": left})

    def finish(self, trace: Trace) -> None:
        if self.sink is not None:
            with self._lock:
                self.sink.add(trace)

    def close(self) -> None:
        if self.sink is not None:
            with self._lock:
                self.sink.close()


__all__ = ["Trace", "TraceSink", "Tracer", "stamp_failed_request", "stamp_request"]
