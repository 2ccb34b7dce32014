"""The generate extension's codec: how a body maps to inputs and parameters, Triton's messages, the answers."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
import pytest
from google.protobuf import text_format  # type: ignore[import-untyped]
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.errors import InvalidArgument
from modelhost.frontends.http.generate import (
    decode_generate_request,
    encode_generate_response,
    is_flag_only,
    sse_error_event,
    sse_event,
)
from modelhost.io_specs import TensorSpec, input_specs
from modelhost.types import FINAL_RESPONSE, InferenceRequest, InferenceResponse, Tensor

# Triton's qa model for this endpoint (qa/python_models/generate_models/mock_llm).
MOCK_LLM = """
max_batch_size: 0
input [
  { name: "PROMPT" data_type: TYPE_STRING dims: [ 1, 1 ] },
  { name: "STREAM" data_type: TYPE_BOOL dims: [ 1, 1 ] },
  { name: "input_ids" data_type: TYPE_INT32 dims: [ 1, -1 ] optional: true }
]
"""


def _specs(text: str) -> dict[str, TensorSpec]:
    return input_specs(text_format.Parse(text, ModelConfig()))


def _one(name: str, datatype: str, dims: str) -> dict[str, TensorSpec]:
    return _specs(f'input [ {{ name: "{name}" data_type: TYPE_{datatype} dims: [ {dims} ] }} ]')


def _decode(
    body: Any, specs: dict[str, TensorSpec] | None = None, max_batch_size: int = 0, **kwargs: int
) -> InferenceRequest:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()  # past 64-bit integers too
    return decode_generate_request(
        raw, "mock_llm", "", _specs(MOCK_LLM) if specs is None else specs, max_batch_size, **kwargs
    )


def _fails(body: Any, message: str, specs: dict[str, TensorSpec] | None = None, **kwargs: int) -> None:
    with pytest.raises(InvalidArgument) as info:
        _decode(body, specs, **kwargs)
    assert info.value.message == message


def _inputs(request: InferenceRequest) -> dict[str, Tensor]:
    return {t.name: t for t in request.inputs}


# Requests: members to inputs and parameters.


def test_members_naming_inputs_become_tensors_shaped_from_the_metadata() -> None:
    request = _decode({"PROMPT": "hello world", "STREAM": False, "input_ids": [100, 200]})
    assert (request.model_name, request.model_version, request.id) == ("mock_llm", "", "")
    assert request.outputs == []  # every output
    inputs = _inputs(request)
    assert list(inputs) == ["PROMPT", "STREAM", "input_ids"]
    prompt = inputs["PROMPT"]
    assert (prompt.datatype, prompt.shape) == ("BYTES", [1, 1])
    assert prompt.data.dtype == object and prompt.data.tolist() == [[b"hello world"]]
    stream = inputs["STREAM"]
    assert (stream.datatype, stream.shape, stream.data.dtype) == ("BOOL", [1, 1], np.dtype(np.bool_))
    assert stream.data.tolist() == [[False]]
    ids = inputs["input_ids"]
    assert (ids.datatype, ids.shape, ids.data.dtype) == ("INT32", [1, 2], np.dtype(np.int32))
    assert ids.data.tolist() == [[100, 200]]
    assert request.parameters == {}


def test_a_one_element_array_is_the_same_as_a_scalar() -> None:
    request = _decode({"PROMPT": ["hi"], "STREAM": [True]})
    assert _inputs(request)["PROMPT"].data.tolist() == [[b"hi"]]
    assert _inputs(request)["STREAM"].data.tolist() == [[True]]


def test_other_members_are_parameters_id_included() -> None:
    request = _decode(
        {
            "PROMPT": "p",
            "STREAM": True,
            "id": "42",
            "text_input": "t",
            "n": 3,
            "t": 0.5,
            "b": False,
            "priority": 2,
        }
    )
    assert request.id == "42"
    # Triton sets `id` as a string parameter too; `priority` is a custom parameter, not the scheduling field.
    assert request.parameters == {"id": "42", "text_input": "t", "n": 3, "t": 0.5, "b": False, "priority": 2}
    assert request.priority == 0


def test_the_parameters_object_adds_parameters_and_inputs() -> None:
    request = _decode({"STREAM": True, "parameters": {"REPETITION": 3, "PROMPT": "inside", "s": "x"}})
    assert request.parameters == {"REPETITION": 3, "s": "x"}
    assert _inputs(request)["PROMPT"].data.tolist() == [[b"inside"]]


def test_an_integer_past_int64_is_a_double_parameter() -> None:
    value = _decode({"big": 2**63}).parameters["big"]
    assert type(value) is float and value == 2.0**63
    assert _decode({"small": -(2**63)}).parameters["small"] == -(2**63)


def test_a_duplicated_parameter_keeps_its_first_value() -> None:
    assert _decode(b'{"temperature": 1, "temperature": 2}').parameters == {"temperature": 1}


def test_no_members_make_an_empty_request() -> None:
    request = _decode({})
    assert request.inputs == [] and request.parameters == {}


@pytest.mark.parametrize(
    ("dims", "max_batch_size", "value", "shape"),
    [
        ("1", 8, "a", [1, 1]),
        ("1", 8, ["a", "b"], [2, 1]),  # the batch dim takes what the fixed dims leave
        ("-1", 8, ["a", "b", "c"], [1, 3]),  # the innermost variable dim takes it first
        ("-1", 0, ["a", "b", "c"], [3]),
        ("2, -1", 4, ["a", "b", "c", "d"], [1, 2, 2]),
        ("-1, 2", 0, ["a", "b", "c", "d"], [2, 2]),
        ("2, 2", 0, ["a", "b", "c", "d"], [2, 2]),
        ("-1, -1", 0, "a", [1, 1]),
    ],
)
def test_shapes_follow_tritons_two_passes(
    dims: str, max_batch_size: int, value: Any, shape: list[int]
) -> None:
    request = _decode({"X": value}, _one("X", "STRING", dims), max_batch_size)
    assert request.inputs[0].shape == shape
    assert request.inputs[0].data.shape == tuple(shape)


@pytest.mark.parametrize(("dims", "value"), [("2", ["a", "b", "c"]), ("1, 1", ["a", "b"]), ("3", "a")])
def test_a_value_that_fits_no_shape_is_refused(dims: str, value: Any) -> None:
    _fails(
        {"X": value},
        "The schema can not convert input 'X' to tensor with proper shape",
        _one("X", "STRING", dims),
    )


@pytest.mark.parametrize(
    ("datatype", "values", "dtype"),
    [
        ("BOOL", [True, False], np.bool_),
        ("UINT8", [0, 255], np.uint8),
        ("UINT64", [0, 2**64 - 1], np.uint64),
        ("INT8", [-128, 127], np.int8),
        ("INT64", [-(2**63), 2**63 - 1], np.int64),
        ("FP32", [1, 0.5], np.float32),  # integers are numbers
        ("FP64", [1.5, -2], np.float64),
    ],
)
def test_each_datatype_is_read_from_json(datatype: str, values: list[Any], dtype: type) -> None:
    tensor = _decode({"X": values}, _one("X", datatype, "-1")).inputs[0]
    assert (tensor.datatype, tensor.shape, tensor.data.dtype) == (datatype, [2], np.dtype(dtype))
    assert tensor.data.tolist() == values


def test_nan_and_infinity_are_accepted_as_rapidjson_does() -> None:
    data = _decode(b'{"X": [NaN, Infinity, -Infinity]}', _one("X", "FP32", "-1")).inputs[0].data
    assert np.isnan(data[0]) and data[1] == np.inf and data[2] == -np.inf


def test_an_empty_array_adds_an_input_without_dims_or_data() -> None:
    tensor = _decode({"X": []}, _one("X", "INT32", "-1")).inputs[0]
    assert (tensor.shape, tensor.data.size) == ([], 0)


# Requests: Triton's messages.


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"PROMPT": 123, "STREAM": False},
            "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
        ),
        (
            {"PROMPT": {"USER": "a"}, "STREAM": False},
            "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
        ),
        (
            {"PROMPT": ["a", None]},
            "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
        ),
        (
            {"PROMPT": "hello", "STREAM": "false"},
            "Unable to parse 'data': attempt to access JSON non-boolean as boolean",
        ),
        ({"STREAM": 1}, "Unable to parse 'data': attempt to access JSON non-boolean as boolean"),
        # Members are converted in document order: the first bad one is reported.
        (
            {"PROMPT": True, "STREAM": 123},
            "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
        ),
        (
            {"STREAM": 123, "PROMPT": True},
            "Unable to parse 'data': attempt to access JSON non-boolean as boolean",
        ),
        (
            {"input_ids": [1, 2.5]},
            "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
        ),
        (
            {"input_ids": [1, True]},
            "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
        ),
        ({"input_ids": [[1, 2]]}, "Unable to parse 'data': Shape does not match true shape of 'data' field"),
        ({"PROMPT": [["a", "b"]]}, "Unable to parse 'data': Shape does not match true shape of 'data' field"),
        (
            {"PARAMS": {"P0": 0}},
            "parameter 'PARAMS' has invalid type. It should be either 'int', 'bool', or 'string'.",
        ),
        ({"p": None}, "parameter 'p' has invalid type. It should be either 'int', 'bool', or 'string'."),
        ({"p": [1]}, "parameter 'p' has invalid type. It should be either 'int', 'bool', or 'string'."),
        (
            {"parameters": 1},
            "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object",
        ),
        (
            {"parameters": {"nested": {"twice": 1}}},
            "Converting keyword: 'parameters': parameter 'nested' has invalid type. It should be either 'int', "
            "'bool', or 'string'.",
        ),
        (
            {"parameters": {"STREAM": "no"}},
            "Converting keyword: 'parameters': Unable to parse 'data': attempt to access JSON non-boolean as boolean",
        ),
        ({"id": 42}, "Unable to parse 'id': attempt to access JSON non-string as string"),
    ],
)
def test_bad_values_get_tritons_messages(body: dict[str, Any], message: str) -> None:
    _fails(body, message)


@pytest.mark.parametrize(
    ("datatype", "value", "message"),
    [
        (
            "UINT8",
            -1,
            "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
        (
            "UINT64",
            2**64,
            "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
        (
            "INT64",
            2**63,
            "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
        ),
        ("FP32", "1.0", "Unable to parse 'data': attempt to access JSON non-number as double"),
        ("FP64", False, "Unable to parse 'data': attempt to access JSON non-number as double"),
        # Triton truncates these silently; like /infer, modelhost refuses them.
        ("UINT8", 256, "Unable to parse 'data': a value of input 'X' is out of range for UINT8"),
        ("INT8", -129, "Unable to parse 'data': a value of input 'X' is out of range for INT8"),
        (
            "FP16",
            1.0,
            "receiving FP16 data via JSON is not supported. Please use the binary data format for input X",
        ),
        (
            "BF16",
            1.0,
            "receiving BF16 data via JSON is not supported. Please use the binary data format for input X",
        ),
    ],
)
def test_values_a_datatype_cannot_hold(datatype: str, value: Any, message: str) -> None:
    _fails({"X": value}, message, _one("X", datatype, "1"))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"PROMPT": "hello", "STREAM": false, "PROMPT": "duplicate"}', "PROMPT"),
        (b'{"PROMPT": "hello", "STREAM": false, "STREAM": false}', "STREAM"),
        (b'{"PROMPT": "hello", "STREAM": false, "PROMPT": "duplicate", "STREAM": true}', "PROMPT"),
        (b'{"PROMPT": "hello", "STREAM": false, "STREAM": true, "PROMPT": "duplicate"}', "STREAM"),
        (b'{"PROMPT": "hello", "parameters": {"PROMPT": "again"}}', "PROMPT"),
    ],
)
def test_a_duplicated_input_is_refused_at_its_second_occurrence(body: bytes, message: str) -> None:
    expected = f"input '{message}' already exists in request"
    if b"parameters" in body:
        expected = "Converting keyword: 'parameters': [request id: <id_unknown>] " + expected
    else:
        expected = "[request id: <id_unknown>] " + expected
    _fails(body, expected)


def test_the_request_id_prefixes_a_duplicate_input_message() -> None:
    _fails(
        b'{"id": "7", "STREAM": true, "STREAM": true}',
        "[request id: 7] input 'STREAM' already exists in request",
    )


def test_an_input_named_parameters_conflicts_with_the_keyword() -> None:
    _fails(
        {"parameters": {"a": 1}},
        "Keyword 'parameters' for nested schema also given as input tensor name",
        _one("parameters", "INT32", "1"),
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "failed to parse the request JSON buffer: The document is empty. at 0"),
        (b"  \n", "failed to parse the request JSON buffer: The document is empty. at 3"),
        (b'{"PROMPT": ', "failed to parse the request JSON buffer: Expecting value at 11"),
        (b"[1, 2]", "attempt to get members for non-object"),
        (b'"text"', "attempt to get members for non-object"),
    ],
)
def test_a_body_that_is_no_json_object(body: bytes, message: str) -> None:
    _fails(body, message)


def test_a_body_that_is_not_utf8() -> None:
    with pytest.raises(InvalidArgument, match=r"^failed to parse the request JSON buffer: "):
        _decode(b'{"PROMPT": "\xff"}')


def test_inputs_are_counted_against_the_maximum_input_size() -> None:
    # A BYTES element counts its length and 4 bytes; the limit is checked input by input, in order.
    assert len(_decode({"PROMPT": "x" * 6}, max_input_size=10).inputs) == 1
    _fails(
        {"PROMPT": "x" * 7},
        "request size of 0 bytes with input 'PROMPT' of size 11 bytes exceeds the maximum allowed input size of "
        "10. Use --http-max-input-size to increase the limit.",
        max_input_size=10,
    )
    _fails(
        {"PROMPT": "x" * 4, "input_ids": [1, 2]},
        "request size of 8 bytes with input 'input_ids' of size 8 bytes exceeds the maximum allowed input size of "
        "10. Use --http-max-input-size to increase the limit.",
        max_input_size=10,
    )


def test_the_parameters_object_counts_its_inputs_apart() -> None:
    request = _decode({"PROMPT": "x" * 6, "parameters": {"input_ids": [1, 2]}}, max_input_size=10)
    assert [t.name for t in request.inputs] == ["PROMPT", "input_ids"]


# Answers.


def _response(
    outputs: list[Tensor], response_id: str = "", parameters: dict[str, Any] | None = None
) -> InferenceResponse:
    return InferenceResponse("mock_llm", "1", response_id, outputs, dict(parameters or {}))


def _text(values: list[bytes], shape: list[int]) -> Tensor:
    data = np.empty(len(values), dtype=object)
    data[:] = values
    return Tensor("TEXT", "BYTES", shape, data.reshape(shape))


def test_an_answer_is_one_flat_object_with_sorted_keys() -> None:
    body = encode_generate_response(_response([_text([b"hello world"], [1, 1])], "42"))
    assert body == b'{"TEXT":"hello world","id":"42","model_name":"mock_llm","model_version":"1"}'


def test_the_id_is_left_out_when_the_request_had_none() -> None:
    body = encode_generate_response(_response([_text([b"a"], [1])]))
    assert orjson.loads(body) == {"TEXT": "a", "model_name": "mock_llm", "model_version": "1"}


def test_several_elements_make_a_flat_array_and_none_an_empty_one() -> None:
    doc = orjson.loads(
        encode_generate_response(
            _response(
                [
                    _text([b"a", b"b", b"c", b"d"], [2, 2]),
                    Tensor("EMPTY", "INT32", [1, 0], np.empty((1, 0), dtype=np.int32)),
                ]
            )
        )
    )
    assert doc["TEXT"] == ["a", "b", "c", "d"]
    assert doc["EMPTY"] == []


@pytest.mark.parametrize(
    ("array", "datatype", "expected"),
    [
        (np.array([[True]]), "BOOL", b"true"),
        (np.array([True, False]), "BOOL", b"[true,false]"),
        (np.array([7], dtype=np.uint8), "UINT8", b"7"),
        (np.array([-1, 2], dtype=np.int64), "INT64", b"[-1,2]"),
        (np.array([0.5, 2.0], dtype=np.float64), "FP64", b"[0.5,2.0]"),
        # A float is written as the double it widens to, as Triton writes it.
        (np.array([0.1], dtype=np.float32), "FP32", b"0.10000000149011612"),
        (np.array([0.1, 0.5], dtype=np.float32), "FP32", b"[0.10000000149011612,0.5]"),
    ],
)
def test_output_values(array: np.ndarray[Any, Any], datatype: str, expected: bytes) -> None:
    body = encode_generate_response(_response([Tensor("OUT", datatype, list(array.shape), array)]))
    assert body == b'{"OUT":' + expected + b',"model_name":"mock_llm","model_version":"1"}'


def test_non_utf8_bytes_are_replaced() -> None:
    doc = orjson.loads(encode_generate_response(_response([_text([b"a\xff"], [1])])))
    assert doc["TEXT"] == "a\ufffd"


def test_response_parameters_are_top_level_keys_without_the_final_flag() -> None:
    response = _response(
        [_text([b"a"], [1])], parameters={"tokens": 3, "done": True, "why": "eos", FINAL_RESPONSE: True}
    )
    doc = orjson.loads(encode_generate_response(response))
    assert doc == {
        "TEXT": "a",
        "done": True,
        "model_name": "mock_llm",
        "model_version": "1",
        "tokens": 3,
        "why": "eos",
    }


def test_the_first_entry_of_a_name_wins() -> None:
    # Reserved keys first, then parameters, then outputs (Triton's std::map emplace).
    response = _response(
        [_text([b"x"], [1]), Tensor("model_name", "INT32", [1], np.array([1], dtype=np.int32))],
        parameters={"TEXT": "param"},
    )
    assert orjson.loads(encode_generate_response(response)) == {
        "TEXT": "param",
        "model_name": "mock_llm",
        "model_version": "1",
    }


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_half_precision_outputs_cannot_be_json(datatype: str) -> None:
    dtype = np.float16 if datatype == "FP16" else np.uint16
    response = _response([Tensor("OUT", datatype, [1], np.zeros(1, dtype=dtype))])
    with pytest.raises(InvalidArgument) as info:
        encode_generate_response(response)
    assert info.value.message == (
        f"sending {datatype} data via JSON is not supported. Please use the binary data format for output"
    )


def test_server_sent_events() -> None:
    assert sse_event(b'{"TEXT":"a"}') == b'data: {"TEXT":"a"}\n\n'
    assert sse_error_event("An Error Occurred") == b'data: {"error":"An Error Occurred"}\n\n'
    assert sse_error_event('say "no"') == b'data: {"error":"say \\"no\\""}\n\n'


def test_flag_only_responses() -> None:
    assert is_flag_only(_response([], parameters={FINAL_RESPONSE: True}))
    assert not is_flag_only(_response([], parameters={FINAL_RESPONSE: False}))
    assert not is_flag_only(_response([_text([b"a"], [1])], parameters={FINAL_RESPONSE: True}))
    errored = _response([], parameters={FINAL_RESPONSE: True})
    errored.error = InvalidArgument("x")
    assert not is_flag_only(errored)


def test_a_nested_array_with_as_many_elements_as_its_outer_array_is_read() -> None:
    request = _decode(b'{"PROMPT": [["a"]], "STREAM": [[true]]}')
    assert [t.data.ravel().tolist() for t in request.inputs] == [[b"a"], [True]]


def test_a_number_too_big_for_a_double_is_refused() -> None:
    _fails(
        b'{"PROMPT": "a", "x": 1e400}',
        "failed to parse the request JSON buffer: Number too big to be stored in double.",
    )
