"""The sequences of a load generator: ids, START/END flags, gRPC's sequence parameters."""

from __future__ import annotations

import json
import random
import re

import pytest

from modelhost.perf.bodies import grpc_request, http_template
from modelhost.perf.inputs import build_input_data
from modelhost.perf.sequences import IdAllocator, SequenceSlot
from modelhost.perf.specs import SequenceSpec
from perf.models import ACCUMULATOR, SIMPLE, options


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
