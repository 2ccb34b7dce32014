"""The prebuilt request bodies: HTTP binary and JSON, gRPC."""

from __future__ import annotations

import json

from modelhost.perf.bodies import grpc_request, http_body, http_request
from modelhost.perf.client import ModelInfo
from modelhost.perf.inputs import build_input_data
from perf.models import SIMPLE, options


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
