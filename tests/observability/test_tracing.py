"""Trace settings (flags and the API), sampling, and the sinks: Triton's JSON files and OpenTelemetry spans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelhost.errors import InvalidArgument, ModelhostError, Unsupported
from modelhost.observability.stats import RequestTiming
from modelhost.observability.tracing.sinks import OpenTelemetrySink, TritonFileSink
from modelhost.observability.tracing.tracer import Trace, Tracer, stamp_failed_request, stamp_request
from modelhost.options.trace import TraceSettings, parse_trace_config


class ListSink:
    def __init__(self) -> None:
        self.traces: list[Trace] = []
        self.closed = False

    def add(self, trace: Trace) -> None:
        self.traces.append(trace)

    def close(self) -> None:
        self.closed = True


def test_trace_config_flags() -> None:
    settings, otel = parse_trace_config(
        [
            "level=TIMESTAMPS",
            "level=TENSORS",
            "rate=2",
            "count=5",
            "triton,file=/tmp/t.json",
            "triton,log-frequency=3",
            "opentelemetry,url=collector:4318/v1/traces",
            "opentelemetry,resource=a=b",
        ]
    )
    assert settings == TraceSettings(("TIMESTAMPS", "TENSORS"), 2, 5, 3, "/tmp/t.json", "triton")
    assert otel.url == "http://collector:4318/v1/traces"
    assert otel.resource == {"a": "b"}


@pytest.mark.parametrize(
    ("word", "level"),
    [
        ("MIN", "TIMESTAMPS"),
        ("max", "TIMESTAMPS"),
        ("on", "TIMESTAMPS"),
        ("true", "TIMESTAMPS"),
        ("false", "OFF"),
    ],
)
def test_the_command_line_takes_tritons_other_words_for_a_level(word: str, level: str) -> None:
    # tritonserver's parser (L0_batcher starts it with --trace-level=MIN)
    settings, _ = parse_trace_config([f"level={word}", "triton,file=/tmp/t.json"])
    assert settings.level == (level,)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["level=LOUD"], "invalid trace level 'LOUD'"),
        (["rate=0"], "sample rate must be non-zero"),
        (["rate=x"], "Unable to parse 'trace_rate', got: x"),
        (["nope=1"], "unknown trace setting 'nope'"),
        (["jaeger,url=x"], "unknown trace mode 'jaeger'"),
        (["level=TIMESTAMPS"], "needs a file"),
        (["mode=zipkin"], "invalid trace mode"),
    ],
)
def test_bad_trace_config_flags(flags: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_trace_config(flags)


def test_api_updates_are_checked_whole_and_strings_as_in_triton() -> None:
    tracer = Tracer(TraceSettings(("TIMESTAMPS",), file="/tmp/x"), ListSink())
    assert tracer.update({"trace_rate": "5", "trace_level": ["TENSORS"]}).to_json() == {
        "trace_level": ["TENSORS"], "trace_rate": "5", "trace_count": "-1", "log_frequency": "0",
        "trace_file": "/tmp/x", "trace_mode": "triton",
    }  # fmt: skip
    for bad in ({"trace_rate": 5}, {"trace_rate": "abc"}, {"trace_level": ["BOGUS"]}, {"other": "1"},
                {"trace_file": "/tmp/y"}, {"trace_rate": "1", "trace_level": "TIMESTAMPS"}, ["x"]):  # fmt: skip
        with pytest.raises(ModelhostError):  # 400, or 501 for the trace file as in Triton
            tracer.update(bad)
    assert tracer.settings_for().rate == 5  # unchanged by the refused updates


def test_a_model_override_falls_back_to_the_global_settings_when_cleared() -> None:
    tracer = Tracer(TraceSettings(("TIMESTAMPS",), rate=10, file="/tmp/x"), ListSink())
    assert tracer.update({"trace_rate": "2"}, "m").rate == 2
    assert tracer.settings_for("other").rate == 10
    assert tracer.update({"trace_rate": None}, "m").rate == 10
    assert "m" not in tracer.model_overrides


def test_a_sampled_caller_context_is_traced_whatever_the_rate_in_opentelemetry_mode() -> None:
    # Triton's L0_trace test_http_trace_triggered: every request carrying a sampled traceparent is traced.
    sampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    otel = Tracer(TraceSettings(("TIMESTAMPS",), rate=5, mode="opentelemetry"), ListSink())
    assert [otel.start("m", "1", "", sampled) is not None for _ in range(3)] == [True, True, True]
    assert [otel.start("m", "1", "", sampled[:-2] + "00") is not None for _ in range(3)] == [
        True,
        False,
        False,
    ]
    triton = Tracer(TraceSettings(("TIMESTAMPS",), rate=5, file="/tmp/x"), ListSink())
    assert [triton.start("m", "1", "", sampled) is not None for _ in range(3)] == [True, False, False]


def test_one_request_of_every_rate_is_traced_while_count_lasts() -> None:
    tracer = Tracer(TraceSettings(("TIMESTAMPS",), rate=2, count=2, file="/tmp/x"), ListSink())
    traced = [tracer.start("m", "1", str(i)) is not None for i in range(8)]
    assert traced == [True, False, True, False, False, False, False, False]
    assert tracer.settings_for().count == 0


def test_tracing_off_takes_nothing() -> None:
    tracer = Tracer(TraceSettings(file="/tmp/x"), ListSink())
    assert tracer.start("m", "1", "") is None
    tracer.update({"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}, "m")
    assert tracer.start("other", "1", "") is None
    assert tracer.start("m", "1", "") is not None


def _trace(tracer_id: int) -> Trace:
    trace = Trace(tracer_id, "m", "1", "r", TraceSettings(("TIMESTAMPS",)))
    trace.stamp("REQUEST_START", 100)
    trace.stamp("REQUEST_END", 200)
    return trace


def test_the_file_sink_writes_at_close_or_every_log_frequency_traces(tmp_path: Path) -> None:
    one = TritonFileSink(str(tmp_path / "all.json"), lambda: 0)
    one.add(_trace(1))
    one.add(_trace(2))
    assert not (tmp_path / "all.json").exists()
    one.close()
    objects = json.loads((tmp_path / "all.json").read_text())
    # As Triton writes them: the request's identity, then each timestamp in an object of its own.
    assert objects[:3] == [
        {"id": 1, "model_name": "m", "model_version": 1, "request_id": "r"},
        {"id": 1, "timestamps": [{"name": "REQUEST_START", "ns": 100}]},
        {"id": 1, "timestamps": [{"name": "REQUEST_END", "ns": 200}]},
    ]
    assert [o["id"] for o in objects[3:]] == [2, 2, 2]

    rolling = TritonFileSink(str(tmp_path / "t.json"), lambda: 2)
    for i in range(5):
        rolling.add(_trace(i + 1))
    rolling.close()
    assert sorted(p.name for p in tmp_path.glob("t.json.*")) == ["t.json.0", "t.json.1", "t.json.2"]


def _stamped(
    trace_id: int, model: str, names: list[str], parent_id: int = 0, ensemble: bool = False
) -> Trace:
    trace = Trace(trace_id, model, "1", "r", TraceSettings(("TIMESTAMPS",)), parent_id=parent_id)
    for i, name in enumerate(names):
        trace.stamp(name, 100 + i)
    trace.ensemble = ensemble
    return trace


CORE = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START"]
CORE_END = ["INFER_RESPONSE_COMPLETE", "COMPUTE_END", "REQUEST_END"]


def test_the_opentelemetry_sink_makes_tritons_spans_under_the_callers_trace() -> None:
    # Triton's spans (L0_trace opentelemetry_unittest): InferRequest with the frontend's events, the model's span
    # with the request's, its compute span; an ensemble's step under the ensemble's span, the ensemble without a
    # compute span of its own.
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from modelhost.options.trace import OpenTelemetrySettings

    exporter = InMemorySpanExporter()
    sink = OpenTelemetrySink(OpenTelemetrySettings(resource={"deployment": "test"}), exporter)
    step = _stamped(8, "simple", CORE + CORE_END, parent_id=7)
    ensemble = _stamped(
        7, "ens", ["HTTP_RECV_START", "HTTP_RECV_END", *CORE, *CORE_END, "HTTP_SEND_START"], ensemble=True
    )
    ensemble.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    sink.add(step)  # a step ends before its ensemble
    assert exporter.get_finished_spans() == ()
    sink.add(ensemble)
    sink.close()
    spans = {
        s.name if s.name != "compute" else f"compute/{s.parent.span_id}": s
        for s in exporter.get_finished_spans()
    }
    root, ens, simple = spans["InferRequest"], spans["ens"], spans["simple"]
    (compute,) = [s for n, s in spans.items() if n.startswith("compute/")]
    assert len(spans) == 4
    assert format(root.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert root.parent is not None and format(root.parent.span_id, "016x") == "b7ad6b7169203331"
    assert ens.parent is not None and ens.parent.span_id == root.context.span_id
    assert simple.parent is not None and simple.parent.span_id == ens.context.span_id
    assert compute.parent is not None and compute.parent.span_id == simple.context.span_id
    assert [e.name for e in root.events] == [
        "HTTP_RECV_START",
        "HTTP_RECV_END",
        "INFER_RESPONSE_COMPLETE",
        "HTTP_SEND_START",
    ]
    assert [e.name for e in ens.events] == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    assert [e.name for e in simple.events] == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    assert [e.name for e in compute.events] == [
        "COMPUTE_START",
        "COMPUTE_INPUT_END",
        "COMPUTE_OUTPUT_START",
        "COMPUTE_END",
    ]
    assert simple.attributes is not None and simple.attributes["triton.model_name"] == "simple"
    assert root.resource.attributes["deployment"] == "test"


def test_a_step_that_ends_after_its_ensemble_still_goes_under_it() -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from modelhost.options.trace import OpenTelemetrySettings

    exporter = InMemorySpanExporter()
    sink = OpenTelemetrySink(OpenTelemetrySettings(), exporter)
    sink.add(_stamped(7, "ens", ["HTTP_RECV_START", *CORE, *CORE_END], ensemble=True))
    sink.add(_stamped(8, "simple", CORE + CORE_END, parent_id=7))  # its completion came a callback later
    sink.close()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert sorted(spans) == ["InferRequest", "compute", "ens", "simple"]
    simple = spans["simple"]
    assert simple.parent is not None and simple.parent.span_id == spans["ens"].context.span_id
    assert (
        spans["ens"].parent is not None
        and spans["ens"].parent.span_id == spans["InferRequest"].context.span_id
    )


def test_the_opentelemetry_sink_keeps_a_bounded_number_of_orphan_steps() -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from modelhost.observability.tracing import sinks
    from modelhost.options.trace import OpenTelemetrySettings

    sink = OpenTelemetrySink(OpenTelemetrySettings(), InMemorySpanExporter())
    for parent in range(1, sinks._MAX_WAITING_PARENTS + 100):
        sink.add(_stamped(100_000 + parent, "step", CORE, parent_id=parent))
    assert len(sink.children) == sinks._MAX_WAITING_PARENTS
    sink.close()


def test_triton_api_wording_for_refused_updates() -> None:
    tracer = Tracer(TraceSettings(("TIMESTAMPS",), rate=3, file="/tmp/x"), ListSink())
    cases = {
        "Unable to parse 'trace_rate', got: abc": {"trace_rate": "abc"},
        "Attempting to set invalid trace setting :sample rate must be non-zero": {"trace_rate": "0"},
        "Unable to parse 'trace_count'. Expecting value >= -1, got: -5": {"trace_count": "-5"},
        "Expect only one trace level 'OFF' is specified": {"trace_level": ["OFF", "TIMESTAMPS"]},
    }
    for message, body in cases.items():
        with pytest.raises(InvalidArgument) as caught:
            tracer.update(body)
        assert str(caught.value) == message
    with pytest.raises(Unsupported, match="trace file location can not be updated through network protocol"):
        tracer.update({"trace_file": "/tmp/y"})
    # A failed update changes nothing, not even the settings it named before the bad one.
    with pytest.raises(InvalidArgument):
        tracer.update({"trace_rate": "7", "trace_count": "abc"})
    assert tracer.settings_for().rate == 3


def test_null_resets_a_global_setting_to_its_startup_value() -> None:
    tracer = Tracer(TraceSettings(("TIMESTAMPS",), rate=3, file="/tmp/x"), ListSink())
    tracer.update({"trace_rate": "9"})
    assert tracer.update({"trace_rate": None}).rate == 3


def test_traces_are_written_as_soon_as_the_count_runs_out(tmp_path: Path) -> None:
    sink = TritonFileSink(str(tmp_path / "t.json"), lambda: 0)
    tracer = Tracer(TraceSettings(("TIMESTAMPS",), rate=1, count=2, file=str(tmp_path / "t.json")), sink)
    for i in range(3):
        trace = tracer.start("m", "1", str(i))
        if trace is not None:
            tracer.finish(trace)
    tracer.close()  # the writer thread is done (the file went to it when the count ran out)
    assert json.loads((tmp_path / "t.json.0").read_text())[0]["request_id"] == "0"
    assert not (tmp_path / "t.json").exists()


def test_tensors_as_triton_writes_them() -> None:
    import numpy as np

    from modelhost.observability.tracing.sinks import trace_objects

    trace = Trace(1, "m", "1", "", TraceSettings(("TENSORS",)))
    trace.tensor("TENSOR_QUEUE_INPUT", "INPUT0", "FP32", np.array([[1.0, 2.0, 8.5]], dtype=np.float32))
    assert trace_objects(trace) == [
        {"id": 1, "activity": "TENSOR_QUEUE_INPUT",
         "tensor": {"name": "INPUT0", "data": "1,2,8.5", "shape": "1,3", "dtype": "FP32"}}
    ]  # fmt: skip


def test_the_file_sink_holds_a_bounded_number_of_traces(tmp_path: Path) -> None:
    from modelhost.observability.tracing import sinks

    sink = TritonFileSink(str(tmp_path / "t.json"), lambda: 0)
    for i in range(3 * sinks._CHUNK_TRACES + 5):
        sink.add(_trace(i + 1))
        assert len(sink.pending) < sinks._CHUNK_TRACES
    sink.writer.submit(lambda: None).result()  # the chunks handed over so far are written
    assert (tmp_path / "t.json.partial").exists() and not (tmp_path / "t.json").exists()
    sink.close()
    objects = json.loads((tmp_path / "t.json").read_text())
    assert len({o["id"] for o in objects}) == 3 * sinks._CHUNK_TRACES + 5
    assert not (tmp_path / "t.json.partial").exists()


def test_settings_beyond_32_bits_are_refused() -> None:
    tracer = Tracer(TraceSettings(("TIMESTAMPS",), file="/tmp/x"), ListSink())
    with pytest.raises(InvalidArgument, match="at most 4294967295"):
        tracer.update({"trace_rate": "99999999999999999999"})


@pytest.mark.parametrize(
    ("timing", "expected"),
    [
        # Refused before the model took its inputs: the request's start and end only.
        (None, ["REQUEST_START", "REQUEST_END"]),
        # Cancelled in the queue: it was queued (Triton's L0_trace test_grpc_trace_model_cancel_in_queue).
        (RequestTiming(input_ns=10), ["REQUEST_START", "QUEUE_START", "REQUEST_END"]),
        # Cancelled while executing: its compute points too, for the compute span.
        (
            RequestTiming(input_ns=10, queue_ns=20),
            [
                "REQUEST_START",
                "QUEUE_START",
                "COMPUTE_START",
                "COMPUTE_INPUT_END",
                "COMPUTE_OUTPUT_START",
                "COMPUTE_END",
                "REQUEST_END",
            ],
        ),
    ],
)
def test_a_failed_request_is_stamped_as_far_as_it_got(
    timing: RequestTiming | None, expected: list[str]
) -> None:
    trace = Trace(1, "m", "1", "", TraceSettings())
    trace.timing = timing
    stamp_failed_request(trace, 1000, 5000)
    assert [name for name, _ in trace.timestamps] == expected
    assert [ns for _, ns in trace.timestamps] == sorted(ns for _, ns in trace.timestamps)


def test_a_held_answer_completes_when_it_leaves() -> None:
    # preserve_ordering: INFER_RESPONSE_COMPLETE after the wait for the answers before it; COMPUTE_END unmoved.
    trace = Trace(1, "m", "1", "", TraceSettings())
    stamp_request(
        trace, 0, RequestTiming(input_ns=10, queue_ns=10, infer_ns=100, output_ns=10, held_ns=500), 1000
    )
    stamps = dict(trace.timestamps)
    assert stamps["COMPUTE_END"] == 130 and stamps["INFER_RESPONSE_COMPLETE"] == 630
