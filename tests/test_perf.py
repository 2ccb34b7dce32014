"""Unit tests of `modelhost perf`: options, input data, request bodies, the stability rule, the CSV layout."""

from __future__ import annotations

import argparse
import base64
import csv
import io
import json
import random
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from modelhost.perf import main
from modelhost.perf.bodies import grpc_request, http_body, http_request, http_template
from modelhost.perf.client import ModelInfo, PerfError, ServerStats, TensorInfo, split_url
from modelhost.perf.inputs import build_input_data
from modelhost.perf.measure import StepResult, Window, is_stable, latency_ns, merge_windows
from modelhost.perf.options import PerfOptions, Range, parse_args, parse_range, parse_shape
from modelhost.perf.plot import html_page
from modelhost.perf.report import csv_header, csv_text, profile_export, step_text
from modelhost.perf.shm import ShmRefs, layout
from modelhost.perf.worker import (
    IdAllocator,
    Recorder,
    SequenceSlot,
    SequenceSpec,
    _response_end,
    final_response,
)

CSV_HEADER = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
    "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency"
)

SIMPLE = ModelInfo(
    name="simple",
    version="",
    max_batch_size=8,
    inputs=[TensorInfo("INPUT0", "INT32", [-1, 16]), TensorInfo("INPUT1", "INT32", [-1, 16])],
    outputs=[TensorInfo("OUTPUT0", "INT32", [-1, 16]), TensorInfo("OUTPUT1", "INT32", [-1, 16])],
)


def options(*args: str) -> PerfOptions:
    return parse_args(["-m", "simple", *args])


# --- Options


def test_defaults_are_perf_analyzers() -> None:
    o = options()
    assert (o.url, o.protocol, o.batch_size, o.interval_ms, o.stability_pct, o.max_trials) == (
        "localhost:8000",
        "http",
        1,
        5000,
        10.0,
        10,
    )
    assert o.concurrency == Range(1, 1, 1) and o.request_rate is None
    assert o.percentile == -1 and o.percentiles == (50, 90, 95, 99)
    assert options("-i", "grpc").url == "localhost:8001"


def test_ranges() -> None:
    assert parse_range("2:8:2", True).values(0) == [2, 4, 6, 8]
    assert parse_range("4", True).values(0) == [4]
    assert parse_range("1:3", True).values(0) == [1, 2, 3]
    assert parse_range("100:200:50", False).values(0) == [100, 150, 200]
    assert parse_range("1:0:1", True).values(5) == [1, 2, 3, 4, 5]
    for bad in ("x", "0:4", "4:2", "1:4:0", "1:2:3:4", "1::2"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_range(bad, True)


def test_shape_flag() -> None:
    assert parse_shape("IMAGE:3,224,224") == ("IMAGE", [3, 224, 224])
    assert parse_shape("a:b:4") == ("a:b", [4])
    with pytest.raises(argparse.ArgumentTypeError):
        parse_shape("IMAGE")


@pytest.mark.parametrize(
    "args",
    [
        ["--concurrency-range", "1:2", "--request-rate-range", "10:20"],
        ["--percentile", "100"],
        ["--concurrency-range", "1:0"],
        ["-i", "grpc", "--input-tensor-format", "json"],
        ["-i", "tcp"],
        ["-b", "0"],
    ],
)
def test_bad_flags_are_argparse_errors(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-m", "simple", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("modelhost perf: error: ")


def test_worker_count() -> None:
    assert options("--processes", "3").worker_count() == 3
    assert options("--concurrency-range", "1").worker_count() == 1


def test_percentile_is_reported_too() -> None:
    assert options("--percentile", "75").percentiles == (50, 75, 90, 95, 99)


def test_split_url() -> None:
    assert split_url("localhost:9000", 8000) == ("localhost", 9000)
    assert split_url("http://host", 8000) == ("host", 8000)
    with pytest.raises(PerfError):
        split_url("host:port", 8000)


# --- Input data


def write_json(tmp_path: Path, document: object) -> str:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(document))
    return str(path)


def test_zero_and_random_data_with_batch() -> None:
    zero = build_input_data(SIMPLE, options("--input-data", "zero", "-b", "4")).entries
    assert len(zero) == 1
    t = zero[0][0]
    assert (t.name, t.datatype, t.shape) == ("INPUT0", "INT32", [4, 16])
    assert t.raw == bytes(4 * 16 * 4)
    rand = build_input_data(SIMPLE, options()).entries[0][1]
    values = np.frombuffer(rand.raw, dtype="<i4")
    assert values.size == 16 and values.tolist() == rand.values


def test_json_data_lists_b64_and_content(tmp_path: Path) -> None:
    ones = list(range(16))
    b64 = base64.b64encode(np.arange(16, dtype="<i4").tobytes()).decode()
    document = {
        "data": [
            {"INPUT0": ones, "INPUT1": [ones[:8], ones[8:]]},
            {"INPUT0": {"b64": b64}, "INPUT1": {"content": ones, "shape": [16]}},
        ]
    }
    entries = build_input_data(
        SIMPLE, options("--input-data", write_json(tmp_path, document), "-b", "2")
    ).entries
    assert len(entries) == 2
    for entry in entries:
        for tensor in entry:
            assert tensor.shape == [2, 16]
            assert np.frombuffer(tensor.raw, dtype="<i4").tolist() == ones * 2


def test_json_data_streams_and_bytes(tmp_path: Path) -> None:
    info = ModelInfo("s", "", 0, [TensorInfo("INPUT", "BYTES", [1])], [])
    elements = struct.pack("<I", 3) + b"abc"
    document = {
        "data": [
            [{"INPUT": ["1"]}, {"INPUT": ["2"]}],
            [{"INPUT": {"b64": base64.b64encode(elements).decode()}}],
        ]
    }
    data = build_input_data(info, options("--input-data", write_json(tmp_path, document)))
    assert [len(s) for s in data.streams] == [2, 1]
    assert data.streams[0][1][0].raw == struct.pack("<I", 1) + b"2"
    assert data.streams[1][0][0].raw == elements
    assert data.streams[1][0][0].values == ["abc"]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"data": [{"INPUT0": [1, 2], "INPUT1": list(range(16))}]}, "entry 1, input INPUT0: 2 elements"),
        ({"data": [{"INPUT1": list(range(16))}]}, "entry 1, input INPUT0: missing"),
        ({"data": []}, 'non-empty "data"'),
        ({"data": [{"INPUT0": {"b64": "AAAA"}, "INPUT1": list(range(16))}]}, "3 bytes of b64 data"),
        ({"data": [{"INPUT0": {"x": 1}, "INPUT1": list(range(16))}]}, "expected a list"),
        ({"data": [{"INPUT0": ["a"] * 16, "INPUT1": list(range(16))}]}, "do not fit datatype INT32"),
    ],
)
def test_json_data_errors(tmp_path: Path, document: object, message: str) -> None:
    with pytest.raises(PerfError, match=message):
        build_input_data(SIMPLE, options("--input-data", write_json(tmp_path, document)))


def test_bad_json_file_and_shapes(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(PerfError, match="not valid JSON"):
        build_input_data(SIMPLE, options("--input-data", str(tmp_path / "bad.json")))
    with pytest.raises(PerfError, match="cannot read"):
        build_input_data(SIMPLE, options("--input-data", str(tmp_path / "missing.json")))
    variable = ModelInfo("v", "", 0, [TensorInfo("X", "FP32", [-1, 4])], [])
    with pytest.raises(PerfError, match="--shape X:d1,d2"):
        build_input_data(variable, options())
    assert build_input_data(variable, options("--shape", "X:3,4")).entries[0][0].shape == [3, 4]
    with pytest.raises(PerfError, match="does not support batching"):
        build_input_data(variable, options("--shape", "X:3,4", "-b", "2"))
    with pytest.raises(PerfError, match="max_batch_size 8"):
        build_input_data(SIMPLE, options("-b", "9"))


# --- Request bodies


def test_http_binary_body() -> None:
    o = options("--input-data", "zero")
    entry = build_input_data(SIMPLE, o).entries[0]
    body, headers = http_body(entry, o)
    length = int(headers["Inference-Header-Content-Length"])
    header = json.loads(body[:length])
    assert header["inputs"][0] == {
        "name": "INPUT0",
        "shape": [1, 16],
        "datatype": "INT32",
        "parameters": {"binary_data_size": 64},
    }
    assert header["parameters"] == {"binary_data_output": True}
    assert len(body) == length + 128
    request = http_request(entry, o, SIMPLE, "h:1")
    assert request.startswith(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: h:1\r\n")
    assert f"Content-Length: {len(body)}\r\n\r\n".encode() + body in request


def test_http_json_body() -> None:
    o = options("--input-tensor-format", "json", "--output-tensor-format", "json", "--input-data", "zero")
    entry = build_input_data(SIMPLE, o).entries[0]
    body, headers = http_body(entry, o)
    assert headers == {"Content-Type": "application/json"}
    document = json.loads(body)
    assert document["inputs"][1]["data"] == [0] * 16 and "parameters" not in document


def test_grpc_request() -> None:
    from tritonclient.grpc import service_pb2

    info = ModelInfo("simple", "1", 8, SIMPLE.inputs, SIMPLE.outputs)
    raw = grpc_request(build_input_data(info, options("--input-data", "zero")).entries[0], info)
    request = service_pb2.ModelInferRequest.FromString(raw)
    assert (request.model_name, request.model_version) == ("simple", "1")
    assert [list(t.shape) for t in request.inputs] == [[1, 16], [1, 16]]
    assert request.raw_input_contents[0] == bytes(64)


# --- Load generator pieces


def test_response_end() -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Type: x\r\nContent-Length: 5\r\n\r\nhello"
    assert _response_end(ok) == len(ok)
    assert _response_end(ok[:-1]) == -1
    assert _response_end(ok[:20]) == -1
    assert _response_end(ok + b"HTTP/1.1") == len(ok)
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    assert _response_end(chunked) == len(chunked)
    assert _response_end(chunked[:-2]) == -1
    assert _response_end(b"HTTP/1.1 204 No Content\r\n\r\n") == 27


def test_recorder_collects_by_end_time() -> None:
    r = Recorder()
    for start, end in [(0, 5), (1, 10), (2, 15), (3, 25)]:
        r.starts.append(start)
        r.ends.append(end)
    r.send_ns = 7
    reply = r.collect(8, 20)
    assert np.frombuffer(reply[2], dtype=np.int64).tolist() == [10, 15]
    assert reply[3] == 7 and reply[5] == 2
    assert list(r.ends) == [25] and r.send_ns == 0


# --- Stability and results


def test_stability_rule() -> None:
    assert not is_stable([100, 100], [1, 1], 10)
    assert is_stable([100, 105, 109], [1.0, 1.05, 1.09], 10)
    assert not is_stable([100, 105, 111], [1, 1, 1], 10)  # throughput 11% apart
    assert not is_stable([100, 100, 100], [1.0, 1.0, 1.2], 10)  # latency 20% apart
    assert is_stable([50, 300, 100, 100, 100], [9, 9, 1, 1, 1], 10)  # only the last three count
    assert not is_stable([0, 0, 0], [1, 1, 1], 10)
    assert is_stable([100, 104, 100], [1, 1, 1], 5) and not is_stable([100, 106, 100], [1, 1, 1], 5)


def test_latency_metric() -> None:
    latencies = np.arange(1, 101, dtype=np.int64)
    assert latency_ns(latencies, -1) == 50.5
    assert latency_ns(latencies, 95) == pytest.approx(95.05)
    assert latency_ns(np.zeros(0, np.int64), 95) == 0.0


def result(value: float, throughput_scale: int, o: PerfOptions) -> StepResult:
    starts = np.zeros(100 * throughput_scale, dtype=np.int64)
    ends = np.full(100 * throughput_scale, 2_000_000, dtype=np.int64)  # 2 ms each
    server = ServerStats(
        inference_count=100,
        execution_count=100,
        success_count=100,
        success_ns=100 * 500_000,
        queue_count=100,
        queue_ns=100 * 100_000,
        compute_input_count=100,
        compute_input_ns=100 * 10_000,
        compute_infer_count=100,
        compute_infer_ns=100 * 300_000,
        compute_output_count=100,
        compute_output_ns=100 * 20_000,
    )
    window = Window(0, 1_000_000_000, starts, ends, 1000 * starts.size, 3000 * starts.size, server)
    return merge_windows([window], "concurrency", value, o, True, 3)


def test_step_numbers() -> None:
    o = options()
    r = result(4, 1, o)
    assert r.throughput == 100 and r.latency_avg_us == 2000
    assert (r.send_us, r.recv_us) == (1, 3)
    assert r.server_avg_us("queue") == 100 and r.server_compute_us == 330
    assert r.server_overhead_us == 70  # 500 - 100 - 330
    assert r.network_us == 2000 - 1 - 3 - 100 - 330
    text = step_text(r, o)
    assert "Throughput: 100 infer/sec" in text
    assert "overhead 70 usec + queue 100 usec + compute input 10 usec" in text


def test_csv_layout() -> None:
    o = options()
    assert ",".join(csv_header(o)) == CSV_HEADER
    rows = list(csv.reader(io.StringIO(csv_text([result(8, 3, o), result(1, 1, o), result(4, 2, o)], o))))
    assert ",".join(rows[0]) == CSV_HEADER
    assert [row[0] for row in rows[1:]] == ["1", "4", "8"]  # sorted by throughput
    assert rows[1] == ["1", "100", "1", "1566", "100", "10", "300", "20", "3", "2000", "2000", "2000", "2000"]


def test_csv_variants() -> None:
    verbose = options("--verbose-csv")
    assert csv_header(verbose)[-3:] == ["Avg latency", "request/response", "response wait"]
    assert csv_header(options("--verbose-csv", "--percentile", "95"))[-2:] == [
        "request/response",
        "response wait",
    ]
    rate = options("--request-rate-range", "100:200:100")
    assert csv_header(rate)[0] == "Request Rate"
    rows = list(csv.reader(io.StringIO(csv_text([result(4, 1, verbose)], verbose))))
    assert len(rows[1]) == len(rows[0]) and rows[1][-3:] == ["2000", "4", "1996"]


def test_profile_export_and_plot() -> None:
    o = options()
    results = [result(1, 1, o), result(2, 2, o)]
    exported = profile_export(results, o, SIMPLE)
    assert [e["experiment"] for e in exported["experiments"]] == [
        {"mode": "concurrency", "value": 1},
        {"mode": "concurrency", "value": 2},
    ]
    first = exported["experiments"][0]
    assert len(first["requests"]) == 100
    request = first["requests"][0]
    assert request["response_timestamps"][0] - request["timestamp"] == 2_000_000
    assert len(first["window_boundaries"]) == 2
    json.dumps(exported)
    page = html_page(results, o, "simple <test>")
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "simple &lt;test&gt;" in page
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")


# --- Streaming, sequences, shared memory


def test_new_options() -> None:
    o = options()
    assert (o.streaming, o.shared_memory, o.output_shm_size) == (False, "none", 102400)
    assert (o.sequence_length, o.sequence_length_variation, o.sequence_id_range) == (20, 20.0, (1, 2**63 - 1))
    o = options("-i", "grpc", "--streaming", "--shared-memory", "system", "--output-shared-memory-size", "64")
    assert (o.streaming, o.shared_memory, o.output_shm_size) == (True, "system", 64)
    o = options("--sequence-length", "5", "--sequence-length-variation", "0", "--sequence-id-range", "7:9")
    assert (o.sequence_length, o.sequence_length_variation, o.sequence_id_range) == (5, 0.0, (7, 9))
    assert options("--sequence-id-range", "3").sequence_id_range == (3, 2**63 - 1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--streaming"], "--streaming is only valid with -i grpc"),
        (["--shared-memory", "cuda"], "--shared-memory cuda is not supported"),
        (["--shared-memory", "gpu"], "invalid choice"),
        (["--sequence-id-range", "5:5"], "start < end"),
        (["--sequence-id-range", "0:4"], "start < end"),
        (["--sequence-id-range", "a"], "expected start[:end]"),
        (["--output-shared-memory-size", "0"], "must be at least 1"),
    ],
)
def test_new_option_errors(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-m", "simple", *args]) == 2
    assert message in capsys.readouterr().err


ACCUMULATOR = ModelInfo(
    name="acc",
    version="",
    max_batch_size=4,
    inputs=[TensorInfo("INPUT", "INT32", [-1, 1])],
    outputs=[TensorInfo("OUTPUT", "INT32", [-1, 1])],
    sequence=True,
)


def sequence_spec(protocol: str, id_range: str = "10:14", length: str = "3") -> SequenceSpec:
    o = options(
        "--sequence-id-range", id_range, "--sequence-length", length, "--sequence-length-variation", "0"
    )
    data = build_input_data(ACCUMULATOR, o)
    flag_sets = ((False, False), (False, True), (True, False), (True, True))
    if protocol == "http":
        templates = [
            [[http_template(e, o, ACCUMULATOR, "h:1", None, 0, f) for f in flag_sets] for e in data.entries]
        ]
    else:
        templates = [
            [[(grpc_request(e, ACCUMULATOR, None, 0, f), -1) for f in flag_sets] for e in data.entries]
        ]
    first, end = o.sequence_id_range
    return SequenceSpec(templates, o.sequence_length, o.sequence_length_variation, first, end)


def http_parameters(request: bytes) -> dict[str, object]:
    body = request[request.index(b"\r\n\r\n") + 4 :]
    head = json.loads(body[: int(re.search(rb"Inference-Header-Content-Length: (\d+)", request)[1])])  # type: ignore[index]
    return dict(head["parameters"])


def test_http_sequences_ids_and_flags() -> None:
    spec = sequence_spec("http")
    ids = IdAllocator(spec, 0, 1)
    a = SequenceSlot(spec, ids, random.Random(0), [0])
    b = SequenceSlot(spec, ids, random.Random(0), [0])
    seen = [http_parameters(a.next()) for _ in range(4)]
    assert [(p["sequence_id"], p["sequence_start"], p["sequence_end"]) for p in seen] == [
        (10, True, False),
        (10, False, False),
        (10, False, True),
        (11, True, False),  # the next sequence: a new id (10 is given back once its END was answered)
    ]
    assert http_parameters(b.next())["sequence_id"] == 12  # ids are handed out round the range
    assert http_parameters(a.next())["sequence_id"] == 11  # a's sequence goes on
    end = a.close()
    assert end is not None and http_parameters(end) == {
        "sequence_id": 11,
        "sequence_start": False,
        "sequence_end": True,
        "binary_data_output": True,
    }
    assert a.close() is None
    a.release()
    assert ids.in_use == {12}
    for _ in range(3):  # b: 12 to its end, then 13, then around to 10 (11 was given back)
        b.next()
    assert b.sequence_id == 13
    for _ in range(3):
        b.next()
    assert b.sequence_id == 10


def test_sequence_ids_never_shared() -> None:
    spec = sequence_spec("http", "1:9", "2")
    processes = [IdAllocator(spec, i, 2) for i in range(2)]
    slots = [SequenceSlot(spec, ids, random.Random(i), [0]) for ids in processes for i in range(4)]
    for _ in range(20):
        held = []
        for slot in slots:
            slot.next()
            held.append(slot.sequence_id)
        assert len(set(held)) == len(held)  # 8 slots, 8 ids, none shared
    assert {i % 2 for i in processes[0].in_use} == {1} and {i % 2 for i in processes[1].in_use} == {0}
    with pytest.raises(RuntimeError, match="no free sequence id"):
        SequenceSlot(spec, processes[0], random.Random(0), [0]).next()


def test_grpc_sequence_request() -> None:
    from tritonclient.grpc import service_pb2

    spec = sequence_spec("grpc")
    slot = SequenceSlot(spec, IdAllocator(spec, 0, 1), random.Random(0), [0])
    request = service_pb2.ModelInferRequest.FromString(slot.next())
    p = request.parameters
    assert (p["sequence_id"].int64_param, p["sequence_start"].bool_param, p["sequence_end"].bool_param) == (
        10,
        True,
        False,
    )
    assert request.model_name == "acc" and len(request.raw_input_contents) == 1
    streamed = grpc_request(build_input_data(SIMPLE, options()).entries[0], SIMPLE, empty_final_response=True)
    decoded = service_pb2.ModelInferRequest.FromString(streamed)
    assert decoded.parameters["triton_enable_empty_final_response"].bool_param


def test_shared_memory_requests() -> None:
    from tritonclient.grpc import service_pb2

    o = options("-b", "2", "--output-shared-memory-size", "100")
    entries = build_input_data(SIMPLE, o).entries
    shm_layout = layout(entries, SIMPLE, o)
    assert shm_layout.inputs == [[(0, 128), (128, 128)]] and shm_layout.input_size == 256
    assert (
        shm_layout.outputs == [("OUTPUT0", 0, 200), ("OUTPUT1", 200, 200)] and shm_layout.output_size == 400
    )
    refs = ShmRefs("in0", "out0", shm_layout)
    body, headers = http_body(entries[0], o, refs, 0)
    assert headers == {"Content-Type": "application/json"}
    header = json.loads(body)
    assert header["inputs"][1]["parameters"] == {
        "shared_memory_region": "in0",
        "shared_memory_offset": 128,
        "shared_memory_byte_size": 128,
    }
    assert header["outputs"][1] == {
        "name": "OUTPUT1",
        "parameters": {
            "shared_memory_region": "out0",
            "shared_memory_offset": 200,
            "shared_memory_byte_size": 200,
        },
    }
    assert "parameters" not in header  # no binary_data_output: the outputs are in shared memory
    request = service_pb2.ModelInferRequest.FromString(grpc_request(entries[0], SIMPLE, refs, 0))
    assert not request.raw_input_contents
    assert request.inputs[1].parameters["shared_memory_offset"].int64_param == 128
    assert request.outputs[0].parameters["shared_memory_region"].string_param == "out0"


def test_streaming_final_response_and_recorder() -> None:
    from tritonclient.grpc import service_pb2

    response = service_pb2.ModelStreamInferResponse()
    response.infer_response.parameters["triton_final_response"].bool_param = True
    assert final_response(response.SerializeToString()) == ("", True, False)
    response.infer_response.outputs.add().name = "OUT"
    response.infer_response.parameters["triton_final_response"].bool_param = False
    assert final_response(response.SerializeToString()) == ("", False, True)
    assert final_response(service_pb2.ModelStreamInferResponse(error_message="boom").SerializeToString())[0]
    r = Recorder(streaming=True)
    for start, first, end, count in [(0, 2, 5, 1), (1, 3, 10, 3), (3, 4, 25, 2)]:
        r.starts.append(start)
        r.firsts.append(first)
        r.ends.append(end)
        r.counts.append(count)
    reply = r.collect(8, 20)
    assert np.frombuffer(reply[8], dtype=np.int64).tolist() == [3]
    assert np.frombuffer(reply[9], dtype=np.int64).tolist() == [3]
    assert list(r.firsts) == [4] and list(r.counts) == [2]
    window = Window(
        0, 10**9, np.array([1]), np.array([10]), 0, 0, ServerStats(), np.array([3]), np.array([3])
    )
    step = merge_windows([window], "concurrency", 1, options("-i", "grpc", "--streaming"), True, 1)
    assert step.first_response_us == 0.002 and step.responses_per_request == 3
    assert "Avg responses per request: 3.00" in step_text(step, options("-i", "grpc", "--streaming"))
