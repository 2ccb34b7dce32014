"""The gRPC inference messages: ModelInferRequest decoded into the core's request (raw contents, typed contents,
shared-memory windows, parameters) and answers encoded back, with Triton's messages."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from modelhost.errors import InvalidArgument
from modelhost.frontends.grpc.codec import decode_request, encode_response
from modelhost.types import FINAL_RESPONSE, InferenceResponse, ShmWindow, Tensor


def message() -> service_pb2.ModelInferRequest:
    msg = service_pb2.ModelInferRequest(model_name="m", model_version="3", id="r")
    msg.parameters["priority"].uint64_param = 2
    msg.parameters["custom"].string_param = "x"
    msg.inputs.add(name="X", datatype="FP32", shape=[2])
    msg.raw_input_contents.append(struct.pack("<2f", 1.5, 2.5))
    return msg


def test_raw_contents_and_parameters() -> None:
    request = decode_request(message())
    assert (request.model_name, request.model_version, request.id, request.priority) == ("m", "3", "r", 2)
    assert request.parameters == {"custom": "x"}
    assert request.inputs[0].data.tolist() == [1.5, 2.5] and not request.shared_memory


def test_typed_contents() -> None:
    msg = service_pb2.ModelInferRequest(model_name="m")
    msg.inputs.add(name="I", datatype="INT64", shape=[3]).contents.int64_contents.extend([1, 2, 3])
    assert decode_request(msg).inputs[0].data.tolist() == [1, 2, 3]


def test_shared_memory_tensors_are_windows_for_the_engine() -> None:
    msg = service_pb2.ModelInferRequest(model_name="m")
    tensor = msg.inputs.add(name="X", datatype="FP32", shape=[4])
    tensor.parameters["shared_memory_region"].string_param = "in"
    tensor.parameters["shared_memory_byte_size"].int64_param = 16
    out = msg.outputs.add(name="Y")
    out.parameters["shared_memory_region"].string_param = "out"
    out.parameters["shared_memory_offset"].int64_param = 4
    out.parameters["shared_memory_byte_size"].int64_param = 8
    request = decode_request(msg)
    assert request.shared_memory
    assert request.inputs[0].shm == ShmWindow("in", 0, 16)
    assert request.outputs[0].shm == ShmWindow("out", 4, 8)


def test_missing_data_is_named() -> None:
    msg = service_pb2.ModelInferRequest(model_name="m")
    msg.inputs.add(name="X", datatype="FP32", shape=[1])
    with pytest.raises(InvalidArgument, match="unable to find data for input tensor 'X' for model 'm'"):
        decode_request(msg)


def test_an_output_written_to_shared_memory_keeps_its_place_without_bytes() -> None:
    response = InferenceResponse(
        "m",
        "1",
        "r",
        [
            Tensor("A", "INT32", [1], np.array([7], dtype=np.int32)),
            Tensor("S", "FP32", [1], np.array([1.0], dtype=np.float32), shm=ShmWindow("out", 0, 4)),
        ],
        {FINAL_RESPONSE: True, "n": 3},
    )
    msg = encode_response(response)
    assert [o.name for o in msg.outputs] == ["A", "S"]
    assert list(msg.raw_output_contents) == [struct.pack("<i", 7), b""]
    assert msg.parameters[FINAL_RESPONSE].bool_param is True and msg.parameters["n"].int64_param == 3
