"""Where finished traces go: Triton's JSON trace files (mode `triton`), or OpenTelemetry spans over OTLP/HTTP
(mode `opentelemetry`, with the `tracing` extra installed)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from modelhost.observability.tracing.tracer import Trace
from modelhost.options.trace import OpenTelemetrySettings

log = logging.getLogger("modelhost.tracing")

# Traces handed to the writer thread at once, at the latest: by count, and by the bytes their tensors hold.
_CHUNK_TRACES = 256
_CHUNK_BYTES = 16 * 1024 * 1024


def _number(value: Any) -> str:
    """A tensor element as Triton writes it: 1 for 1.0, 8.5 for 8.5."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def trace_objects(trace: Trace) -> list[dict[str, Any]]:
    """A trace as the objects Triton writes for it: its identity, each timestamp in an object of its own, and at
    level TENSORS the input and output tensors (alone at level TENSORS without TIMESTAMPS, as in Triton)."""
    objects: list[dict[str, Any]] = []
    if "TIMESTAMPS" in trace.settings.level:
        info: dict[str, Any] = {
            "id": trace.id,
            "model_name": trace.model_name,
            "model_version": int(trace.model_version)
            if trace.model_version.isdigit()
            else trace.model_version,
        }
        if trace.request_id:
            info["request_id"] = trace.request_id
        if trace.parent_id:
            info["parent_id"] = trace.parent_id
        objects.append(info)
        objects.extend({"id": trace.id, "timestamps": [{"name": n, "ns": ns}]} for n, ns in trace.timestamps)
    for activity, name, datatype, array in trace.tensors:
        data = ",".join(_number(v) for v in array.reshape(-1).tolist())
        tensor = {"name": name, "data": data, "shape": ",".join(map(str, array.shape)), "dtype": datatype}
        objects.append({"id": trace.id, "activity": activity, "tensor": tensor})
    return objects


class TritonFileSink:
    """Triton's trace files: with `log_frequency` 0 every trace goes to `file`, which appears when the server
    stops; with n > 0, each n traces go to `<file>.<index>` (0, 1, ...) as soon as they are complete, and the
    rest to the next index at stop. When `count` runs out, the traces so far are written at once (Triton too).

    Memory stays bounded whatever the rate: traces are handed in chunks to a writer thread of the sink's own,
    which appends them to `<file>.partial` (the JSON array being written) and renames it when the file is
    complete. The event loop, where traces end, never waits for a file and never formats JSON."""

    def __init__(self, file: str, log_frequency_of: Callable[[], int]) -> None:
        self.file = Path(file)
        self.partial = Path(f"{file}.partial")
        self.log_frequency_of = log_frequency_of  # the setting can change at run time
        self.pending: list[Trace] = []
        self.pending_bytes = 0
        self.in_file = 0  # traces of the file being written, handed over or pending
        self.index = 0
        self.writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trace-writer")
        self._started = False  # writer thread only: the partial file holds its opening bracket

    def add(self, trace: Trace) -> None:
        self.pending.append(trace)
        self.pending_bytes += trace.nbytes
        self.in_file += 1
        frequency = self.log_frequency_of()
        if (frequency > 0 and self.in_file >= frequency) or trace.last:
            self._hand_over(Path(f"{self.file}.{self.index}"))
            self.index += 1
        elif len(self.pending) >= _CHUNK_TRACES or self.pending_bytes >= _CHUNK_BYTES:
            self._hand_over(None)

    def close(self) -> None:
        if self.in_file:
            complete = self.file if self.log_frequency_of() == 0 and self.index == 0 else None
            self._hand_over(complete or Path(f"{self.file}.{self.index}"))
        self.writer.shutdown(wait=True)

    def _hand_over(self, complete: Path | None) -> None:
        traces, self.pending, self.pending_bytes = self.pending, [], 0
        if complete is not None:
            self.in_file = 0
        self.writer.submit(self._write, traces, complete)

    def _write(self, traces: list[Trace], complete: Path | None) -> None:
        try:
            body = orjson.dumps([o for trace in traces for o in trace_objects(trace)])[1:-1]
            with open(self.partial, "ab" if self._started else "wb") as out:
                if not self._started:
                    out.write(b"[")
                    self._started = True
                elif body:
                    body = b"," + body
                out.write(body)
                if complete is not None:
                    out.write(b"]")
            if complete is not None:
                os.replace(self.partial, complete)
                self._started = False
        except OSError as e:
            log.error("failed to write trace file %s: %s", complete or self.partial, e)


# Where a timestamp goes among Triton's OpenTelemetry spans: the frontend's on the request's root span
# ("InferRequest"), the backend's on the "compute" span, the rest on the model's span.
# The model span's own activities (events of it); any other `<X>_START` / `<X>_END` is a custom activity.
_MODEL_ACTIVITIES = frozenset({"REQUEST_START", "QUEUE_START", "REQUEST_END"})


def _is_frontend(name: str) -> bool:
    return name.startswith(("HTTP_", "GRPC_")) or name == "INFER_RESPONSE_COMPLETE"


# Child traces (an ensemble's steps) waiting for their root, at most: beyond, the oldest are dropped.
_MAX_WAITING_PARENTS = 4096


class OpenTelemetrySink:
    """Triton's spans for each traced request, exported in batches over OTLP/HTTP: a root span "InferRequest"
    with the frontend's events, a child span named after the model with REQUEST_START, QUEUE_START and
    REQUEST_END, under it a "compute" span with the COMPUTE_* events (none for an ensemble) and the spans of the
    ensemble's steps, each with its own compute span. The client's W3C `traceparent` makes the root span a child
    of the caller's. A step's trace ends before its ensemble's: it waits here for its root."""

    def __init__(self, settings: OpenTelemetrySettings, exporter: Any = None) -> None:
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.trace import set_span_in_context
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
        except ImportError as e:  # checked at startup: the CLI refuses the mode without the extra
            raise RuntimeError(
                "tracing mode opentelemetry needs the 'tracing' extra: pip install 'modelhost[tracing]'"
            ) from e
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(endpoint=settings.url)
        resource = Resource.create({"service.name": "triton-inference-server", **settings.resource})
        self.provider = TracerProvider(resource=resource)
        batch = settings.batch
        self.provider.add_span_processor(
            BatchSpanProcessor(
                exporter,
                max_queue_size=batch.get("bsp_max_queue_size"),
                schedule_delay_millis=batch.get("bsp_schedule_delay"),
                max_export_batch_size=batch.get("bsp_max_export_batch_size"),
            )
        )
        self.tracer = self.provider.get_tracer("modelhost")
        self.propagator = TraceContextTextMapPropagator()
        self.in_context = set_span_in_context
        # Steady-clock timestamps to wall-clock ones, which spans carry.
        self.offset = time.time_ns() - time.monotonic_ns()
        self.children: dict[int, list[Trace]] = {}
        # The model span of each trace exported lately, by trace id: a step whose trace ends after its
        # ensemble's (its completion is a callback away) still goes under it. Bounded as `children`.
        self.exported: dict[int, Any] = {}

    def add(self, trace: Trace) -> None:
        if trace.parent_id:
            parent = self.exported.get(trace.parent_id)
            if parent is not None:
                if trace.timestamps:
                    self._model_span(trace, parent)
                return
            self.children.setdefault(trace.parent_id, []).append(trace)
            while len(self.children) > _MAX_WAITING_PARENTS:
                self.children.pop(next(iter(self.children)))
            return
        if not trace.timestamps:
            self.children.pop(trace.id, None)
            return
        parent = self.propagator.extract({"traceparent": trace.traceparent}) if trace.traceparent else None
        times = [ns for _, ns in trace.timestamps]
        root = self.tracer.start_span("InferRequest", context=parent, start_time=min(times) + self.offset)
        for name, ns in trace.timestamps:
            if _is_frontend(name):
                root.add_event(name, timestamp=ns + self.offset)
        self._model_span(trace, self.in_context(root))
        root.end(end_time=max(times) + self.offset)

    def _model_span(self, trace: Trace, context: Any) -> None:
        stamps = [(n, ns) for n, ns in trace.timestamps if not _is_frontend(n)]
        compute = [(n, ns) for n, ns in stamps if n.startswith("COMPUTE_")]
        events = [(n, ns) for n, ns in stamps if not n.startswith("COMPUTE_")]
        times = [ns for _, ns in stamps] or [ns for _, ns in trace.timestamps]
        span = self.tracer.start_span(
            trace.model_name,
            context=context,
            start_time=min(times) + self.offset,
            attributes={
                "triton.model_name": trace.model_name,
                "triton.model_version": trace.model_version,
                "triton.trace_id": trace.id,
                "triton.trace_parent_id": trace.parent_id,
                "triton.request_id": trace.request_id,
            },
        )
        inside = self.in_context(span)
        for name, ns in self._custom_spans(events, inside):
            span.add_event(name, timestamp=ns + self.offset)
        self.exported[trace.id] = inside
        while len(self.exported) > _MAX_WAITING_PARENTS:
            self.exported.pop(next(iter(self.exported)))
        if compute and not trace.ensemble:
            compute_span = self.tracer.start_span(
                "compute", context=inside, start_time=compute[0][1] + self.offset
            )
            for name, ns in compute:
                compute_span.add_event(name, timestamp=ns + self.offset)
            compute_span.end(end_time=compute[-1][1] + self.offset)
        for child in self.children.pop(trace.id, []):
            if child.timestamps:
                self._model_span(child, inside)
        span.end(end_time=max(times) + self.offset)

    def _custom_spans(self, events: list[tuple[str, int]], context: Any) -> list[tuple[str, int]]:
        """Custom activities `<X>_START` ... `<X>_END` become spans `<X>` under the model's span (Triton's rule
        for a backend's activities); the other stamps are returned, to be the model span's events."""
        rest: list[tuple[str, int]] = []
        opened: dict[str, int] = {}
        for name, ns in events:
            if name.endswith("_START") and name not in _MODEL_ACTIVITIES:
                opened[name.removesuffix("_START")] = ns
            elif name.endswith("_END") and name.removesuffix("_END") in opened:
                label = name.removesuffix("_END")
                custom = self.tracer.start_span(
                    label, context=context, start_time=opened.pop(label) + self.offset
                )
                custom.end(end_time=ns + self.offset)
            else:
                rest.append((name, ns))
        rest.extend((f"{label}_START", ns) for label, ns in opened.items())  # never ended: an event
        return sorted(rest, key=lambda stamp: stamp[1])

    def close(self) -> None:
        self.provider.shutdown()  # flushes what is batched


__all__ = ["OpenTelemetrySink", "TritonFileSink", "trace_objects"]
