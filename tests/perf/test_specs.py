"""What each load-generator process is given: its requests, their target, and its share of sequence ids."""

from __future__ import annotations

from modelhost.perf.bodies import GRPC_INFER_METHOD, GRPC_STREAM_METHOD
from modelhost.perf.client import ModelInfo
from modelhost.perf.inputs import build_input_data
from modelhost.perf.specs import worker_spec
from perf.models import ACCUMULATOR, SIMPLE, options


def test_http_spec() -> None:
    o = options("-u", "example:9000", "--input-data", "zero")
    spec = worker_spec(o, SIMPLE, build_input_data(SIMPLE, o), 1, 3, None)
    assert (spec.protocol, spec.host, spec.port, spec.grpc_method) == ("http", "example", 9000, "")
    assert (spec.process_index, spec.process_count, spec.sequence) == (1, 3, None)
    (request,) = spec.requests
    assert request.startswith(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: example:9000\r\n")


def test_grpc_specs() -> None:
    o = options("-i", "grpc")
    spec = worker_spec(o, SIMPLE, build_input_data(SIMPLE, o), 0, 1, None)
    assert (spec.host, spec.port, spec.grpc_method) == ("localhost", 8001, GRPC_INFER_METHOD)
    assert not spec.streaming
    decoupled = ModelInfo("d", "", 8, SIMPLE.inputs, SIMPLE.outputs, decoupled=True)
    o = options("-i", "grpc", "--streaming")
    spec = worker_spec(o, decoupled, build_input_data(decoupled, o), 0, 1, None)
    assert (spec.grpc_method, spec.streaming, spec.decoupled) == (GRPC_STREAM_METHOD, True, True)


def test_sequence_templates() -> None:
    o = options("--sequence-id-range", "5:50", "--sequence-length", "4")
    data = build_input_data(ACCUMULATOR, o)
    spec = worker_spec(o, ACCUMULATOR, data, 0, 2, None)
    assert spec.sequence is not None
    assert (spec.sequence.id_start, spec.sequence.id_end, spec.sequence.length) == (5, 50, 4)
    # One stream of entries, each with a request for every flag set (start/middle/end/start+end).
    assert [len(stream) for stream in spec.sequence.templates] == [len(data.entries)]
    assert all(len(flags) == 4 for flags in spec.sequence.templates[0])
