"""The KServe v2 HTTP inference bodies: JSON and binary tensors decoded into the core's request, raw binary bodies
by a model's signature, shared-memory tensors as windows, and answers encoded back, with Triton's messages."""

from __future__ import annotations

import struct

import numpy as np
import orjson
import pytest

from modelhost.datatypes import WIRE_TO_NUMPY
from modelhost.engine_api import ModelSignature
from modelhost.errors import InvalidArgument
from modelhost.frontends.http.infer_codec import decode_json_request, decode_raw_request, encode_response
from modelhost.io_specs import TensorSpec
from modelhost.types import InferenceResponse, ShmWindow, Tensor


def doc(**fields: object) -> bytes:
    return orjson.dumps(fields)


def test_json_tensors_and_reserved_parameters() -> None:
    body = doc(
        id="7",
        parameters={"priority": 3, "timeout": 1000, "sequence_id": 5, "custom": True},
        inputs=[
            {"name": "A", "datatype": "INT32", "shape": [2, 2], "data": [1, 2, 3, 4]},
            {"name": "S", "datatype": "BYTES", "shape": [1], "data": ["é"]},
        ],
        outputs=[{"name": "B", "parameters": {"binary_data": True}}],
    )
    decoded = decode_json_request("m", "2", body, None)
    request = decoded.request
    assert (request.model_name, request.model_version, request.id) == ("m", "2", "7")
    assert (request.priority, request.timeout_us) == (3, 1000)
    assert request.parameters == {"sequence_id": 5, "custom": True}
    assert request.inputs[0].data.tolist() == [[1, 2], [3, 4]] and request.inputs[0].data.dtype == np.int32
    assert request.inputs[1].data.tolist() == ["é".encode()]
    assert request.outputs[0].binary is True and not request.shared_memory


def test_binary_tensors_follow_the_json_header() -> None:
    header = doc(
        inputs=[{"name": "X", "datatype": "FP32", "shape": [3], "parameters": {"binary_data_size": 12}}]
    )
    decoded = decode_json_request("m", "", header, memoryview(struct.pack("<3f", 1, 2, 3)))
    assert decoded.request.inputs[0].data.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(InvalidArgument, match="expecting 4 additional bytes"):
        decode_json_request("m", "", header, memoryview(b"\0" * 8))
    with pytest.raises(InvalidArgument, match="unexpected additional input data"):
        decode_json_request("m", "", header, memoryview(b"\0" * 16))


def test_a_repeated_header_is_decoded_afresh_for_each_request() -> None:
    """The header's decoded form is kept: each request still gets its own tensors, objects and checks."""
    header = doc(
        parameters={"custom": 1},
        inputs=[
            {"name": "X", "datatype": "FP32", "shape": [2], "parameters": {"binary_data_size": 8}},
            {"name": "J", "datatype": "INT32", "shape": [2], "data": [5, 6]},
            {"name": "B", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 7}},
        ],
        outputs=[{"name": "Y", "parameters": {"binary_data": True}}],
    )
    words = struct.pack("<I", 3) + b"abc"
    first = decode_json_request("repeat", "", header, memoryview(struct.pack("<2f", 1, 2) + words)).request
    second = decode_json_request("repeat", "", header, memoryview(struct.pack("<2f", 3, 4) + words)).request
    assert first.inputs[0].data.tolist() == [1.0, 2.0] and second.inputs[0].data.tolist() == [3.0, 4.0]
    assert second.inputs[2].data.tolist() == [b"abc"]
    # What one request's handling changes is not seen by the next one with the same header.
    first.parameters["added"] = True
    first.inputs[0].shape.append(9)
    first.inputs[1].data[0] = 0
    first.outputs[0].parameters["x"] = 1
    third = decode_json_request("repeat", "", header, memoryview(struct.pack("<2f", 5, 6) + words)).request
    assert third.parameters == {"custom": 1} and third.inputs[0].shape == [2]
    assert third.inputs[1].data.tolist() == [5, 6] and third.outputs[0].parameters == {}
    # The binary part is checked on every request, and BYTES elements are split anew.
    with pytest.raises(InvalidArgument, match="expecting 4 additional bytes"):
        decode_json_request("repeat", "", header, memoryview(struct.pack("<2f", 1, 2) + words[:3]))
    with pytest.raises(InvalidArgument, match="unexpected additional input data"):
        decode_json_request("repeat", "", header, memoryview(struct.pack("<2f", 1, 2) + words + b"!"))
    with pytest.raises(InvalidArgument, match="B"):
        decode_json_request(
            "repeat", "", header, memoryview(struct.pack("<2f", 1, 2) + struct.pack("<I", 9) + b"abc")
        )
    # A header whose sizes contradict its shape is refused each time, not only when first seen.
    wrong = doc(
        inputs=[{"name": "X", "datatype": "FP32", "shape": [2], "parameters": {"binary_data_size": 4}}]
    )
    for _ in range(2):
        with pytest.raises(InvalidArgument, match="X"):
            decode_json_request("repeat", "", wrong, memoryview(b"\0" * 4))
    # Another model with the same header has its own name in its errors.
    with pytest.raises(InvalidArgument, match="model 'other'"):
        decode_json_request("other", "", header, memoryview(b""))


def test_kept_headers_are_bounded() -> None:
    from modelhost.frontends.http import infer_codec

    for i in range(infer_codec._PLAN_COUNT * 2 + 5):
        body = doc(id=str(i), inputs=[{"name": "X", "datatype": "INT32", "shape": [1], "data": [i]}])
        assert decode_json_request("bounded", "", body, None).request.inputs[0].data.tolist() == [i]
        assert len(infer_codec._plans) <= infer_codec._PLAN_COUNT
    large = doc(
        id="x" * infer_codec._PLAN_HEADER_BYTES,
        inputs=[{"name": "X", "datatype": "INT32", "shape": [1], "data": [1]}],
    )
    decode_json_request("bounded", "", large, None)
    assert all(len(key[2]) <= infer_codec._PLAN_HEADER_BYTES for key in infer_codec._plans)


def test_shared_memory_tensors_are_windows_for_the_engine() -> None:
    body = doc(
        inputs=[
            {
                "name": "X",
                "datatype": "FP32",
                "shape": [4],
                "parameters": {"shared_memory_region": "in", "shared_memory_byte_size": 16},
            }
        ],
        outputs=[
            {
                "name": "Y",
                "parameters": {
                    "shared_memory_region": "out",
                    "shared_memory_offset": 8,
                    "shared_memory_byte_size": 16,
                },
            }
        ],
    )
    request = decode_json_request("m", "", body, None).request
    assert request.shared_memory
    assert request.inputs[0].shm == ShmWindow("in", 0, 16) and request.inputs[0].data.size == 0
    assert request.outputs[0].shm == ShmWindow("out", 8, 16)
    no_size = doc(
        inputs=[{"name": "X", "datatype": "FP32", "shape": [1], "parameters": {"shared_memory_region": "in"}}]
    )
    with pytest.raises(InvalidArgument, match="'shared_memory_byte_size' must be specified"):
        decode_json_request("m", "", no_size, None)


def test_bad_json_bodies_say_what_is_wrong() -> None:
    with pytest.raises(InvalidArgument, match="failed to parse the request JSON buffer"):
        decode_json_request("m", "", b"{nope", None)
    with pytest.raises(InvalidArgument, match="invalid datatype for input X"):
        decode_json_request(
            "m", "", doc(inputs=[{"name": "X", "datatype": "F33", "shape": [1], "data": [1]}]), None
        )
    with pytest.raises(InvalidArgument, match="Input must set only one of the following fields"):
        decode_json_request("m", "", doc(inputs=[{"name": "X", "datatype": "FP32", "shape": [1]}]), None)


def spec(name: str, datatype: str, dims: tuple[int, ...]) -> TensorSpec:
    return TensorSpec(name, datatype, WIRE_TO_NUMPY[datatype], dims, None)


def test_a_raw_binary_body_takes_its_shape_from_the_signature() -> None:
    signature = ModelSignature("m", "1", {"X": spec("X", "FP32", (-1, 2))}, 4, False)
    request = decode_raw_request(signature, "", struct.pack("<6f", *range(6))).request
    assert request.inputs[0].shape == [1, 3, 2]
    two_inputs = ModelSignature(
        "m", "1", {"X": spec("X", "FP32", (1,)), "Y": spec("Y", "FP32", (1,))}, 0, False
    )
    with pytest.raises(InvalidArgument, match="Raw request must only have 1 input"):
        decode_raw_request(two_inputs, "", b"\0" * 4)


def test_answers_as_json_binary_or_written_to_shared_memory() -> None:
    body = doc(
        inputs=[{"name": "X", "datatype": "INT32", "shape": [1], "data": [0]}],
        outputs=[{"name": "J"}, {"name": "B", "parameters": {"binary_data": True}}, {"name": "S"}],
    )
    request = decode_json_request("m", "", body, None).request
    response = InferenceResponse(
        "m",
        "1",
        "",
        [
            Tensor("J", "INT32", [2], np.array([1, 2], dtype=np.int32)),
            Tensor("B", "FP32", [1], np.array([0.5], dtype=np.float32)),
            Tensor("S", "FP32", [1], np.array([9.0], dtype=np.float32), shm=ShmWindow("out", 0, 4)),
        ],
    )
    payload, json_length = encode_response(response, request, binary_all=False)
    assert json_length is not None
    answer = orjson.loads(payload[:json_length])
    assert answer["outputs"][0] == {"name": "J", "datatype": "INT32", "shape": [2], "data": [1, 2]}
    assert answer["outputs"][1]["parameters"] == {"binary_data_size": 4}
    assert answer["outputs"][2] == {"name": "S", "datatype": "FP32", "shape": [1]}  # the engine wrote it
    assert payload[json_length:] == struct.pack("<f", 0.5)
