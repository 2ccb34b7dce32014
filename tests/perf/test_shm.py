"""Shared memory: the regions' layout and the requests that point into them."""

from __future__ import annotations

import json

from modelhost.perf.bodies import grpc_request, http_body
from modelhost.perf.inputs import build_input_data
from modelhost.perf.shm import ShmRefs, layout
from perf.models import SIMPLE, options


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
