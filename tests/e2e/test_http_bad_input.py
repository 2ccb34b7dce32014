"""Bad input over HTTP: each mistake gets a 4xx with Triton's wording, and the server keeps serving.

Messages are Triton's (2.51, checked against the real tritonserver) where Triton answers 4xx. Where Triton
answers 500 to a client's malformed request, the answer here is 400 under Triton's "Unable to parse '<field>'"
prefix. After every test the server must still answer a good request and its log must hold no traceback.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import select
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from e2e.server_process import RunningServer, running_server

SIMPLE = "simple"
GOOD16 = list(range(16))
BATCH_NOTE = (
    " NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to "
    "each input shape. If you want to specify the full shape including the batch dim in your input dims config, "
    "try setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size."
)
ID = "[request id: <id_unknown>] "
SHAPE_ERROR = "Unable to parse 'shape': the shape of input 'INPUT0' must be an array of non-negative integers"
TRITON_RESERVED = (
    "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."
)
ONE_SOURCE = (
    "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
    "'shared_memory_region' in 'parameters'. "
)


# -- helpers ---------------------------------------------------------------------------------------------------


def inp(name: str, shape: Any, datatype: str = "INT32", data: Any = None, **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": name, "shape": shape, "datatype": datatype}
    if data is not None:
        doc["data"] = data
    doc.update(extra)
    return doc


def two(shape: Any = (1, 16), a: Any = GOOD16, b: Any = GOOD16, **extra: Any) -> dict[str, Any]:
    """A request for `simple`: INPUT0 and INPUT1 of the same shape, as JSON."""
    return {"inputs": [inp("INPUT0", list(shape), data=a), inp("INPUT1", list(shape), data=b)], **extra}


def binary_body(doc: dict[str, Any], *blobs: bytes) -> tuple[bytes, dict[str, str]]:
    header = json.dumps(doc).encode()
    return header + b"".join(blobs), {"Inference-Header-Content-Length": str(len(header))}


def bds(name: str, shape: list[int], size: int, datatype: str = "INT32") -> dict[str, Any]:
    return inp(name, shape, datatype, parameters={"binary_data_size": size})


def post(
    server: RunningServer,
    path: str,
    body: bytes | dict[str, Any],
    headers: dict[str, str] | None = None,
    method: str = "POST",
) -> requests.Response:
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    return requests.request(method, f"http://{server.http_url}{path}", data=data, headers=headers, timeout=10)


def infer_path(model: str = SIMPLE, version: str = "") -> str:
    return f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"


def assert_error(r: requests.Response, status: int, message: str | Callable[[str], bool]) -> None:
    assert r.status_code == status, r.text
    assert r.headers["Content-Type"] == "application/json"
    error = r.json()["error"]
    if callable(message):
        assert message(error), error
    else:
        assert error == message


def good_request_works(server: RunningServer) -> None:
    r = post(server, infer_path(), two())
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [2 * i for i in range(16)]


def read_response(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or goes quiet for 5 s)."""
    sock.settimeout(5)
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.fixture(autouse=True)
def still_serving(server: RunningServer) -> Iterator[None]:
    """Whatever a test sent, the server answers a good request afterwards and logged no traceback."""
    yield
    good_request_works(server)
    assert "Traceback" not in server.log()


# -- malformed bodies and wrong JSON types -----------------------------------------------------------------------

U8 = "identity_uint8"
Message = str | Callable[[str], bool]


def json_parse_error(error: str) -> bool:
    return error.startswith("failed to parse the request JSON buffer: ")


def bad(
    case: str,
    model: str,
    body: bytes | dict[str, Any],
    message: Message,
    headers: dict[str, str] | None = None,
) -> Any:
    """One request expected to get a 400 whose "error" is `message` (or satisfies it)."""
    return pytest.param(model, body, headers, message, id=case)


def bad_binary(case: str, model: str, doc: dict[str, Any], blobs: list[bytes], message: Message) -> Any:
    body, headers = binary_body(doc, *blobs)
    return pytest.param(model, body, headers, message, id=case)


def data_error(reason: str) -> str:
    return f"Unable to parse 'data': {reason}"


MISMATCH = data_error(
    "Shape does not match true shape of 'data' field: input 'INPUT0' of shape [1,16] needs 16 elements"
)
FP16_OUT = {
    "inputs": [bds("INPUT0", [1, 2], 4, "FP16")],
    "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}],
}

MALFORMED = [
    bad("malformed json", SIMPLE, b"{not json", json_parse_error),
    bad("truncated json", SIMPLE, json.dumps(two()).encode()[:-5], json_parse_error),
    bad("empty body", SIMPLE, b"", json_parse_error),
    bad(
        "deeply nested json", SIMPLE, b'{"inputs":' + b"[" * 100_000 + b"]" * 100_000 + b"}", json_parse_error
    ),
    bad("json array", SIMPLE, b"[1, 2]", "Unable to parse 'inputs': the request must be a JSON object"),
    bad("json string", SIMPLE, b'"x"', "Unable to parse 'inputs': the request must be a JSON object"),
    bad("json number", SIMPLE, b"7", "Unable to parse 'inputs': the request must be a JSON object"),
    bad("missing inputs", SIMPLE, {}, "Unable to parse 'inputs': the request must hold an 'inputs' array"),
    bad(
        "inputs not an array",
        SIMPLE,
        {"inputs": {}},
        "Unable to parse 'inputs': the request must hold an 'inputs' array",
    ),
    bad(
        "input not an object",
        SIMPLE,
        {"inputs": [1]},
        "Unable to parse 'inputs': each input must be a JSON object",
    ),
    bad(
        "input without name",
        SIMPLE,
        {"inputs": [{"shape": [1, 16], "datatype": "INT32", "data": GOOD16}]},
        "Unable to parse 'name': each input must have a string 'name'",
    ),
    bad(
        "input name not a string",
        SIMPLE,
        {"inputs": [inp(5, [1, 16], data=GOOD16)]},
        "Unable to parse 'name': each input must have a string 'name'",
    ),
    bad(
        "input without datatype",
        SIMPLE,
        {"inputs": [{"name": "INPUT0", "shape": [1, 16], "data": GOOD16}]},
        "Unable to parse 'datatype': input 'INPUT0' must have a string 'datatype'",
    ),
    bad(
        "input without shape",
        SIMPLE,
        {"inputs": [{"name": "INPUT0", "datatype": "INT32", "data": GOOD16}]},
        SHAPE_ERROR,
    ),
    bad(
        "invalid datatype",
        SIMPLE,
        {"inputs": [inp("INPUT0", [1, 16], "INT33", GOOD16)]},
        "invalid datatype for input INPUT0",
    ),
    bad(
        "lower-case datatype",
        SIMPLE,
        {"inputs": [inp("INPUT0", [1, 16], "int32", GOOD16)]},
        "invalid datatype for input INPUT0",
    ),
    bad("negative dim", SIMPLE, two([1, -16]), SHAPE_ERROR),
    bad("non-integer dim", SIMPLE, two([1, 16.5]), SHAPE_ERROR),
    bad("string dim", SIMPLE, two([1, "16"]), SHAPE_ERROR),
    bad("boolean dim", SIMPLE, two([True, 16]), SHAPE_ERROR),
    bad("dim past int64", SIMPLE, two([2**63, 1]), SHAPE_ERROR),
    bad("shape not an array", SIMPLE, {"inputs": [inp("INPUT0", 16, data=GOOD16)]}, SHAPE_ERROR),
    # The element count overflows 64 bits: refused before anything is sized by it.
    bad(
        "dims whose product overflows",
        SIMPLE,
        two([2**62, 2**62]),
        ID
        + "input 'INPUT0' for model 'simple' has shape [4611686018427387904,4611686018427387904], too large for "
        "any tensor",
    ),
    bad("fewer elements than the shape", SIMPLE, two(a=GOOD16[:15]), MISMATCH),
    bad("more elements than the shape", SIMPLE, two(a=[*GOOD16, 16]), MISMATCH),
    bad("ragged nested data", SIMPLE, two(a=[list(range(8)), list(range(7))]), MISMATCH),
    bad(
        "strings for INT32",
        SIMPLE,
        two(a=["1"] * 16),
        data_error("the data of INT32 input 'INPUT0' must be integers"),
    ),
    bad(
        "floats for INT32",
        SIMPLE,
        two(a=[1.5] * 16),
        data_error("the data of INT32 input 'INPUT0' must be integers"),
    ),
    bad(
        "booleans for INT32",
        SIMPLE,
        two(a=[True] * 16),
        data_error("the data of INT32 input 'INPUT0' must be integers"),
    ),
    bad(
        "nulls for INT32",
        SIMPLE,
        two(a=[None] * 16),
        data_error("the data of INT32 input 'INPUT0' must be integers"),
    ),
    bad(
        "numbers for BOOL",
        "identity_bool",
        {"inputs": [inp("INPUT0", [1, 2], "BOOL", [1, 0])]},
        data_error("the data of BOOL input 'INPUT0' must be true or false"),
    ),
    bad(
        "numbers for BYTES",
        "identity_bytes",
        {"inputs": [inp("INPUT0", [1, 2], "BYTES", [1, 2])]},
        data_error("the data of BYTES input 'INPUT0' must be strings"),
    ),
    bad(
        "strings for FP64",
        "identity_fp64",
        {"inputs": [inp("INPUT0", [1, 1], "FP64", ["1.0"])]},
        data_error("the data of FP64 input 'INPUT0' must be numbers"),
    ),
    bad(
        "data not an array",
        U8,
        {"inputs": [inp("INPUT0", [1, 1], "UINT8", 5)]},
        data_error("the data of input 'INPUT0' must be a JSON array"),
    ),
    bad(
        "data an object",
        SIMPLE,
        two(a={"x": 1}),
        data_error("the data of input 'INPUT0' must be a JSON array"),
    ),
    # Triton wraps 300 into 44 silently; a value that does not fit is refused here.
    bad(
        "300 for UINT8",
        U8,
        {"inputs": [inp("INPUT0", [1, 2], "UINT8", [300, 1])]},
        data_error("a value of input 'INPUT0' is out of range for UINT8"),
    ),
    bad(
        "-1 for UINT8",
        U8,
        {"inputs": [inp("INPUT0", [1, 2], "UINT8", [-1, 1])]},
        data_error("a value of input 'INPUT0' is out of range for UINT8"),
    ),
    bad(
        "2**40 for INT32",
        SIMPLE,
        two(a=[2**40] * 16),
        data_error("a value of input 'INPUT0' is out of range for INT32"),
    ),
    bad(
        "2**63 for INT64",
        "identity_int64",
        {"inputs": [inp("INPUT0", [1, 2], "INT64", [2**63, -1])]},
        data_error("a value of input 'INPUT0' is out of range for INT64"),
    ),
    # Past 64 bits a JSON integer is read as a float.
    bad(
        "2**64 for UINT64",
        "identity_uint64",
        {"inputs": [inp("INPUT0", [1, 2], "UINT64", [2**64, 1])]},
        data_error("the data of UINT64 input 'INPUT0' must be integers"),
    ),
    bad(
        "FP16 via JSON",
        "identity_fp16",
        {"inputs": [inp("INPUT0", [1, 2], "FP16", [1.0, 2.0])]},
        "receiving FP16 data via JSON is not supported. Please use the binary data format for input INPUT0",
    ),
    bad(
        "BF16 via JSON",
        "identity_fp16",
        {"inputs": [inp("INPUT0", [1, 2], "BF16", [1.0, 2.0])]},
        "receiving BF16 data via JSON is not supported. Please use the binary data format for input INPUT0",
    ),
    bad_binary(
        "FP16 output via JSON",
        "identity_fp16",
        FP16_OUT,
        [np.array([1, 2], np.float16).tobytes()],
        "sending FP16 data via JSON is not supported. Please use the binary data format for output",
    ),
    bad("id not a string", SIMPLE, two(id=5), "Unable to parse 'id': expected a string"),
    bad(
        "parameters not an object",
        SIMPLE,
        two(parameters=[1]),
        "Unable to parse 'parameters': the request's 'parameters' must be a JSON object",
    ),
    bad(
        "parameter of an invalid type",
        SIMPLE,
        two(parameters={"foo": {"a": 1}}),
        "parameter 'foo' has invalid type. It should be either 'int', 'bool', or 'string'.",
    ),
    bad(
        "binary_data_output not a boolean",
        SIMPLE,
        two(parameters={"binary_data_output": "yes"}),
        "Unable to parse 'binary_data_output': expected a boolean",
    ),
    bad(
        "priority not an integer",
        SIMPLE,
        two(parameters={"priority": "high"}),
        "Unable to parse 'priority': expected an unsigned integer",
    ),
    bad(
        "negative timeout",
        SIMPLE,
        two(parameters={"timeout": -1}),
        "Unable to parse 'timeout': expected an unsigned integer",
    ),
    bad(
        "sequence_start not a boolean",
        SIMPLE,
        two(parameters={"sequence_start": 1}),
        "Unable to parse 'sequence_start': expected a boolean",
    ),
    bad(
        "sequence_id a float",
        SIMPLE,
        two(parameters={"sequence_id": 1.5}),
        "Unable to parse 'sequence_id': expected an unsigned integer or a string",
    ),
    bad("outputs not an array", SIMPLE, two(outputs={}), "Unable to parse 'outputs': expected a JSON array"),
    bad(
        "output without name",
        SIMPLE,
        two(outputs=[{}]),
        "Unable to parse 'name': each requested output must be a JSON object with a string 'name'",
    ),
    bad(
        "binary_data not a boolean",
        SIMPLE,
        two(outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": "x"}}]),
        "Unable to parse 'binary_data': expected a boolean for output 'OUTPUT0'",
    ),
    bad(
        "negative classification",
        SIMPLE,
        two(outputs=[{"name": "OUTPUT0", "parameters": {"classification": -1}}]),
        "Unable to parse 'classification': expected an unsigned integer for output 'OUTPUT0'",
    ),
    bad("request parameter triton_", SIMPLE, two(parameters={"triton_x": 1}), TRITON_RESERVED),
    bad(
        "output parameter triton_",
        SIMPLE,
        two(outputs=[{"name": "OUTPUT0", "parameters": {"triton_x": 1}}]),
        TRITON_RESERVED,
    ),
    bad(
        "input parameter triton_",
        SIMPLE,
        {
            "inputs": [
                inp("INPUT0", [1, 16], data=GOOD16, parameters={"triton_x": 1}),
                inp("INPUT1", [1, 16], data=GOOD16),
            ]
        },
        TRITON_RESERVED,
    ),
    bad_binary(
        "data and binary_data_size",
        SIMPLE,
        {
            "inputs": [
                inp("INPUT0", [1, 16], data=GOOD16, parameters={"binary_data_size": 64}),
                inp("INPUT1", [1, 16], data=GOOD16),
            ]
        },
        [bytes(64)],
        ONE_SOURCE + "But set 'data' 'binary_data_size'",
    ),
    bad(
        "neither data nor binary_data_size",
        SIMPLE,
        {"inputs": [inp("INPUT0", [1, 16]), inp("INPUT1", [1, 16], data=GOOD16)]},
        ONE_SOURCE + "But no field is set",
    ),
    bad(
        "null data",
        SIMPLE,
        {"inputs": [inp("INPUT0", [1, 16], data=None), inp("INPUT1", [1, 16], data=GOOD16)]},
        ONE_SOURCE + "But no field is set",
    ),
]


@pytest.mark.parametrize(("model", "body", "headers", "message"), MALFORMED)
def test_malformed_request(
    server: RunningServer,
    model: str,
    body: bytes | dict[str, Any],
    headers: dict[str, str] | None,
    message: Message,
) -> None:
    assert_error(post(server, infer_path(model), body, headers), 400, message)


@pytest.mark.parametrize(
    ("model", "datatype", "values"),
    [
        ("identity_uint64", "UINT64", [2**64 - 1, 0]),
        ("identity_int64", "INT64", [2**63 - 1, -(2**63)]),
        (U8, "UINT8", [255, 0]),
        ("identity_int8", "INT8", [127, -128]),
    ],
)
def test_extreme_integers_are_accepted(
    server: RunningServer, model: str, datatype: str, values: list[int]
) -> None:
    r = post(server, infer_path(model), {"inputs": [inp("INPUT0", [1, 2], datatype, values)]})
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == values


# -- binary tensor data and Inference-Header-Content-Length ------------------------------------------------------

A = np.arange(16, dtype=np.int32).tobytes()
BYTES_IN = "identity_bytes"

BINARY = [
    bad_binary(
        "binary_data_size larger than the body",
        SIMPLE,
        {"inputs": [bds("INPUT0", [1, 16], 64), bds("INPUT1", [1, 16], 64)]},
        [A, A[:-4]],
        "unexpected size for input 'INPUT1', expecting 4 additional bytes for model 'simple'",
    ),
    bad_binary(
        "binary_data_size smaller than the body",
        SIMPLE,
        {"inputs": [bds("INPUT0", [1, 16], 64), bds("INPUT1", [1, 16], 64)]},
        [A, A, b"tail"],
        "unexpected additional input data for model 'simple'",
    ),
    bad(
        "binary_data_size without binary data",
        SIMPLE,
        {"inputs": [bds("INPUT0", [1, 16], 64), inp("INPUT1", [1, 16], data=GOOD16)]},
        "unexpected size for input 'INPUT0', expecting 64 additional bytes for model 'simple'",
    ),
    bad_binary(
        "binary_data_size not the tensor's size",
        SIMPLE,
        {"inputs": [bds("INPUT0", [1, 16], 60), bds("INPUT1", [1, 16], 68)]},
        [A, A],
        ID + "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60",
    ),
    bad_binary(
        "negative binary_data_size",
        SIMPLE,
        {"inputs": [bds("INPUT0", [1, 16], -4), inp("INPUT1", [1, 16], data=GOOD16)]},
        [],
        "Unable to parse 'binary_data_size': expected an unsigned integer for input 'INPUT0'",
    ),
    bad_binary(
        "binary_data_size a string",
        SIMPLE,
        {
            "inputs": [
                inp("INPUT0", [1, 16], parameters={"binary_data_size": "64"}),
                inp("INPUT1", [1, 16], data=GOOD16),
            ]
        },
        [A],
        "Unable to parse 'binary_data_size': expected an unsigned integer for input 'INPUT0'",
    ),
    bad_binary(
        "binary dims whose product overflows",
        U8,
        {"inputs": [bds("INPUT0", [2**62, 2**62], 4, "UINT8")]},
        [bytes(4)],
        ID + "input 'INPUT0' for model 'identity_uint8' has shape [4611686018427387904,4611686018427387904], "
        "too large for any tensor",
    ),
    # More dimensions than numpy allows (64): once a 500 with numpy's traceback.
    bad_binary(
        "binary tensor of 65 dims",
        U8,
        {"inputs": [bds("INPUT0", [1] * 65, 1, "UINT8")]},
        [bytes(1)],
        ID
        + "input 'INPUT0' for model 'identity_uint8' has 65 dimensions, more than the 64 a tensor can have",
    ),
    bad(
        "json tensor of 65 dims",
        U8,
        {"inputs": [inp("INPUT0", [1] * 65, "UINT8", data=[1])]},
        ID
        + "input 'INPUT0' for model 'identity_uint8' has 65 dimensions, more than the 64 a tensor can have",
    ),
    # Zero elements, but dims numpy cannot describe: once a 500 from deep inside numpy.
    bad_binary(
        "empty tensor with enormous dims",
        U8,
        {"inputs": [bds("INPUT0", [2**62, 2**62, 0], 0, "UINT8")]},
        [],
        ID + "input 'INPUT0' for model 'identity_uint8' has shape "
        "[4611686018427387904,4611686018427387904,0], too large for any tensor",
    ),
    # BYTES elements are sized by what the body holds, never by the count the shape claims (once an attempt to
    # allocate 8 TiB).
    bad_binary(
        "BYTES shape claiming 2**40 elements",
        BYTES_IN,
        {"inputs": [bds("INPUT0", [1, 2**40], 4, "BYTES")]},
        [bytes(4)],
        ID
        + "expected 1099511627776 string elements for inference input 'INPUT0' for model 'identity_bytes', "
        "got 1",
    ),
    bad_binary(
        "BYTES with a truncated length prefix",
        BYTES_IN,
        {"inputs": [bds("INPUT0", [1, 1], 3, "BYTES")]},
        [b"\x05\x00\x00"],
        ID + "incomplete string length indicator for inference input 'INPUT0' for model 'identity_bytes', "
        "expecting 4 bytes but only 3 bytes available. Please make sure the string length indicator is in one "
        "buffer.",
    ),
    bad_binary(
        "BYTES with a truncated element",
        BYTES_IN,
        {"inputs": [bds("INPUT0", [1, 1], 6, "BYTES")]},
        [b"\x05\x00\x00\x00ab"],
        "incomplete string data for inference input 'INPUT0', expecting string of length 5 but only 2 bytes "
        "available",
    ),
    bad_binary(
        "BYTES with more elements than the shape",
        BYTES_IN,
        {"inputs": [bds("INPUT0", [1, 1], 10, "BYTES")]},
        [b"\x01\x00\x00\x00a\x01\x00\x00\x00b"],
        ID
        + "unexpected number of string elements 2 for inference input 'INPUT0' for model 'identity_bytes', "
        "expecting 1",
    ),
    bad_binary(
        "BYTES with fewer elements than the shape",
        BYTES_IN,
        {"inputs": [bds("INPUT0", [1, 2], 5, "BYTES")]},
        [b"\x01\x00\x00\x00a"],
        ID + "expected 2 string elements for inference input 'INPUT0' for model 'identity_bytes', got 1",
    ),
]


@pytest.mark.parametrize(("model", "body", "headers", "message"), BINARY)
def test_bad_binary_data(
    server: RunningServer,
    model: str,
    body: bytes | dict[str, Any],
    headers: dict[str, str] | None,
    message: Message,
) -> None:
    assert_error(post(server, infer_path(model), body, headers), 400, message)


GOOD_JSON = json.dumps(two()).encode()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", f"inference header size should be in range (0, {len(GOOD_JSON)}), got: abc"),
        ("-5", f"inference header size should be in range (0, {len(GOOD_JSON)}), got: -5"),
        (
            str(len(GOOD_JSON) + 10),
            f"inference header size should be in range (0, {len(GOOD_JSON)}), got: {len(GOOD_JSON) + 10}",
        ),
        (
            "99999999999999999999999",
            f"inference header size should be in range (0, {len(GOOD_JSON)}), got: 99999999999999999999999",
        ),
    ],
)
def test_inference_header_content_length_out_of_range(
    server: RunningServer, value: str, message: str
) -> None:
    assert_error(
        post(server, infer_path(), GOOD_JSON, {"Inference-Header-Content-Length": value}), 400, message
    )


def test_inference_header_content_length_cutting_the_json(server: RunningServer) -> None:
    r = post(server, infer_path(), GOOD_JSON, {"Inference-Header-Content-Length": str(len(GOOD_JSON) - 10)})
    assert_error(r, 400, lambda e: e.startswith("failed to parse the request JSON buffer: "))


@pytest.mark.parametrize(
    ("model", "body", "message"),
    [
        (
            SIMPLE,
            A + A,
            ID + "Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in "
            "'simple' model configuration",
        ),
        (
            "identity_bytes",
            b"abc",
            ID + "For BYTE datatype raw input 'INPUT0', the model must have input shape [1]",
        ),
        # 6 bytes of FP32: one element deduced, and 2 bytes too many for it.
        (
            "identity_fp32",
            bytes(6),
            ID + "input byte size mismatch for input 'INPUT0' for model 'identity_fp32'. Expected 4, got 6",
        ),
    ],
)
def test_raw_binary_request_that_cannot_be_deduced(
    server: RunningServer, model: str, body: bytes, message: str
) -> None:
    assert_error(
        post(server, infer_path(model), body, {"Inference-Header-Content-Length": "0"}), 400, message
    )


# -- names, versions, shapes and batch sizes against the model config ---------------------------------------------


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        (infer_path("nope"), 404, "Request for unknown model: 'nope' is not found"),
        (infer_path(SIMPLE, "7"), 404, "Request for unknown model: 'simple' version 7 is not found"),
        (infer_path(SIMPLE, "0"), 404, "Request for unknown model: 'simple' version 0 is not found"),
        ("/v2/models/simple/versions/abc/infer", 404, "Not Found"),
        ("/v2/models/simple/versions/-1/infer", 404, "Not Found"),
        (
            infer_path(SIMPLE, "99999999999999999999999"),
            400,
            "failed to get model version from specified version string '99999999999999999999999' (details: stol), "
            "version should be an integral value > 0",
        ),
    ],
)
def test_unknown_model_or_version(server: RunningServer, path: str, status: int, message: str) -> None:
    assert_error(post(server, path, two()), status, message)


@pytest.mark.parametrize("action", ["", "/ready", "/config"])
def test_version_past_int64_on_other_endpoints(server: RunningServer, action: str) -> None:
    r = requests.get(
        f"http://{server.http_url}/v2/models/simple/versions/99999999999999999999{action}", timeout=10
    )
    assert_error(
        r,
        400,
        "failed to get model version from specified version string '99999999999999999999' "
        "(details: stol), version should be an integral value > 0",
    )


def _inputs(*specs: tuple[str, list[int], str]) -> dict[str, Any]:
    inputs = []
    for name, shape, datatype in specs:
        count = int(np.prod(shape))
        inputs.append(inp(name, shape, datatype, [1.0] * count if datatype == "FP32" else [1] * count))
    return {"inputs": inputs}


MODEL_CHECKS: dict[str, tuple[dict[str, Any], str]] = {
    "unknown input": (
        _inputs(("INPUT0", [1, 16], "INT32"), ("INPUT9", [1, 16], "INT32")),
        "unexpected inference input 'INPUT9' for model 'simple'",
    ),
    "an input too many": (
        _inputs(("INPUT0", [1, 16], "INT32"), ("INPUT1", [1, 16], "INT32"), ("INPUT9", [1, 16], "INT32")),
        ID + "expected 2 inputs but got 3 inputs for model 'simple'. Got input(s) "
        "['INPUT0','INPUT1','INPUT9'], but missing required input(s) []. Please provide all "
        "required input(s).",
    ),
    "missing required input": (
        _inputs(("INPUT0", [1, 16], "INT32")),
        ID + "expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], "
        "but missing required input(s) ['INPUT1']. Please provide all required input(s).",
    ),
    "no inputs": (
        {"inputs": []},
        ID + "expected 2 inputs but got 0 inputs for model 'simple'. Got input(s) [], but missing required "
        "input(s) ['INPUT0','INPUT1']. Please provide all required input(s).",
    ),
    "duplicate input": (
        _inputs(("INPUT0", [1, 16], "INT32"), ("INPUT0", [1, 16], "INT32"), ("INPUT1", [1, 16], "INT32")),
        ID + "input 'INPUT0' already exists in request",
    ),
    "wrong datatype": (
        _inputs(("INPUT0", [1, 16], "FP32"), ("INPUT1", [1, 16], "INT32")),
        ID + "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'",
    ),
    "wrong shape": (
        _inputs(("INPUT0", [1, 8], "INT32"), ("INPUT1", [1, 8], "INT32")),
        ID
        + "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,8]."
        + BATCH_NOTE,
    ),
    # Without the batch dim the first dim is read as the batch size, as in Triton.
    "shape without the batch dim": (
        _inputs(("INPUT0", [16], "INT32"), ("INPUT1", [16], "INT32")),
        ID + "inference request batch-size must be <= 8 for 'simple'",
    ),
    "shape without the batch dim, small": (
        _inputs(("INPUT0", [4], "INT32"), ("INPUT1", [4], "INT32")),
        ID + "unexpected shape for input 'INPUT0' for model 'simple'. Expected "
        "[-1,16], got [4]." + BATCH_NOTE,
    ),
    "scalar input to a batching model": (
        _inputs(("INPUT0", [], "INT32"), ("INPUT1", [], "INT32")),
        ID + "input 'INPUT0' has no shape but model requires batch dimension for 'simple'",
    ),
    "batch larger than max_batch_size": (
        _inputs(("INPUT0", [9, 16], "INT32"), ("INPUT1", [9, 16], "INT32")),
        ID + "inference request batch-size must be <= 8 for 'simple'",
    ),
    "mismatched batch sizes": (
        _inputs(("INPUT0", [1, 16], "INT32"), ("INPUT1", [2, 16], "INT32")),
        ID + "input 'INPUT1' batch size does not match other inputs for 'simple'",
    ),
    "unknown output": (
        {**two(), "outputs": [{"name": "OUTPUT9"}]},
        "unexpected inference output 'OUTPUT9' for model 'simple'",
    ),
    # Triton 2.51 answers such a request with the output once; asking twice is refused here.
    "duplicate output": (
        {**two(), "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]},
        ID + "output 'OUTPUT0' is requested more than once",
    ),
    "request id in the message": (
        {**_inputs(("INPUT0", [1, 16], "FP32"), ("INPUT1", [1, 16], "INT32")), "id": "my-7"},
        "[request id: my-7] inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'",
    ),
}


@pytest.mark.parametrize("case", list(MODEL_CHECKS))
def test_request_not_matching_the_model(server: RunningServer, case: str) -> None:
    body, message = MODEL_CHECKS[case]
    assert_error(post(server, infer_path(), body), 400, message)


def test_non_batching_model_shape(server: RunningServer) -> None:
    r = post(server, infer_path("nobatch_int32"), _inputs(("INPUT0", [1, 2, 3], "INT32")))
    assert_error(
        r,
        400,
        ID + "unexpected shape for input 'INPUT0' for model 'nobatch_int32'. Expected [2,3], got [1,2,3].",
    )


def test_tritonclient_sees_the_error(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT0", [1, 8], "INT32")
    tensor.set_data_from_numpy(np.zeros((1, 8), np.int32), binary_data=True)
    other = httpclient.InferInput("INPUT1", [1, 8], "INT32")
    other.set_data_from_numpy(np.zeros((1, 8), np.int32), binary_data=False)
    with pytest.raises(InferenceServerException, match=r"unexpected shape for input 'INPUT0'") as e:
        client.infer(SIMPLE, [tensor, other])
    assert e.value.status() == "400"
    fp16 = httpclient.InferInput("INPUT0", [1, 2], "FP16")
    with pytest.raises(InferenceServerException, match="FP16 data via JSON is not supported"):
        fp16.set_data_from_numpy(np.zeros((1, 2), np.float16), binary_data=False)
        client.infer("identity_fp16", [fp16])
    client.close()


# -- HTTP itself: encodings, methods, paths, malformed requests, disconnects -------------------------------------


def test_unknown_content_encoding(server: RunningServer) -> None:
    r = post(server, infer_path(), GOOD_JSON, {"Content-Encoding": "br"})
    assert_error(r, 415, "unsupported Content-Encoding 'br'; supported: gzip, deflate")
    assert r.headers["Accept-Encoding"] == "gzip, deflate"


def test_corrupt_gzip_body(server: RunningServer) -> None:
    r = post(server, infer_path(), b"not gzip at all", {"Content-Encoding": "gzip"})
    assert_error(r, 400, lambda e: e.startswith("failed to decompress the request body (gzip): "))


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", infer_path()),
        ("PUT", infer_path()),
        ("DELETE", "/v2/models/simple"),
        ("POST", "/v2/health/ready"),
        ("POST", "/v2/models/simple/config"),
        ("GET", "/v2/repository/index"),
    ],
)
def test_wrong_method(server: RunningServer, method: str, path: str) -> None:
    assert_error(post(server, path, b"", method=method), 405, "Method Not Allowed")


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/v2/nope",
        "/v1/models/simple/infer",
        "/v2/models/simple/infer/extra",
        "/v2/models//infer",
        "/v2/models/simple/versions//infer",
    ],
)
def test_unknown_path(server: RunningServer, path: str) -> None:
    r = post(server, path, GOOD_JSON)
    assert r.status_code == 404
    assert r.text == '{"error":"Not Found"}'


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(64),  # a TLS ClientHello to the plain port
        b"GARBAGE\r\n\r\n",
        b"POST /v2/models/simple/infer HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nbad header line\r\n\r\n",
    ],
)
def test_malformed_http_gets_400_and_close(server: RunningServer, garbage: bytes) -> None:
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=5) as sock:
        sock.sendall(garbage)
        answer = read_response(sock)  # returns only once the server has closed the connection
    assert answer.startswith(b"HTTP/1.1 400 ")
    body = answer.split(b"\r\n\r\n", 1)[1]
    assert json.loads(body)["error"].startswith("malformed HTTP request")


def send_and_read(server: RunningServer, head: bytes, seconds: float = 20) -> bytes:
    """Send `head` (from a thread: the server may answer and stop reading long before its end) and read the
    answer."""
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=seconds) as sock:

        def send() -> None:
            with contextlib.suppress(OSError):  # the server closed: the rest is refused
                sock.sendall(head)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        answer = read_response(sock)
    sender.join(seconds)
    return answer


HEAD_LIMIT = "(--http-max-header-size)"


@pytest.mark.parametrize(
    ("head", "status", "message"),
    [
        # Once joined in quadratic time: 10,000 copies of a 1 KB header stalled every connection for 15 s.
        pytest.param(
            b"GET /v2/health/ready HTTP/1.1\r\n" + (b"X-A: " + b"a" * 1024 + b"\r\n") * 10_000 + b"\r\n",
            431,
            HEAD_LIMIT,
            id="10000 copies of a 1 KB header",
        ),
        pytest.param(
            b"GET /v2/health/ready HTTP/1.1\r\nX-Big: " + b"b" * (32 << 20) + b"\r\n\r\n",
            431,
            HEAD_LIMIT,
            id="a 32 MB header line",
        ),
        pytest.param(b"GET /" + b"u" * (16 << 20) + b" HTTP/1.1\r\n\r\n", 414, HEAD_LIMIT, id="a 16 MB URL"),
        pytest.param(
            b"GET /v2/health/ready HTTP/1.1\r\n" + b"A: b\r\n" * 100_000 + b"\r\n",
            431,
            "more than 1000 header fields",
            id="100000 headers",
        ),
    ],
)
def test_request_heads_past_their_limits_are_refused_at_once(
    server: RunningServer, head: bytes, status: int, message: str
) -> None:
    answer = send_and_read(server, head)
    assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer[:200]
    assert message in json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
    r = requests.get(f"http://{server.http_url}/v2/health/ready", timeout=10)
    assert r.status_code == 200  # and still_serving checks inference


def test_a_request_followed_by_a_half_close_is_answered(server: RunningServer) -> None:
    request = (
        f"POST {infer_path()} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(GOOD_JSON)}\r\n\r\n".encode()
        + GOOD_JSON
    )
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
        sock.sendall(request + request)
        sock.shutdown(socket.SHUT_WR)  # as `curl` with --no-keepalive or a proxy may: no more requests
        answer = read_response(sock)
    assert answer.count(b"HTTP/1.1 200 ") == 2, answer[:300]


def test_chunked_and_content_length_is_read_chunked_and_the_connection_closed(server: RunningServer) -> None:
    # RFC 9112 6.3: Transfer-Encoding wins over Content-Length; Triton serves such requests (`requests` sends
    # them). The connection is closed after the answer, so the bytes the Content-Length would have covered (here
    # a smuggled second request) are never read as a request.
    chunked = f"{len(GOOD_JSON):x}\r\n".encode() + GOOD_JSON + b"\r\n0\r\n\r\n"
    smuggled = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
    head = (
        f"POST {infer_path()} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Transfer-Encoding: chunked\r\nContent-Length: {len(chunked) + len(smuggled)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=5) as sock:
        sock.sendall(head + chunked + smuggled)
        answer = read_response(sock)  # returns only once the server has closed the connection
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    assert answer.count(b"HTTP/1.1 ") == 1  # the smuggled request was not answered
    assert b"\r\nConnection: close\r\n" in answer.split(b"\r\n\r\n", 1)[0] + b"\r\n"
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["outputs"][0]["data"] == [2 * i for i in range(16)]


def test_client_disconnecting_mid_body(server: RunningServer) -> None:
    head = (
        f"POST {infer_path()} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(GOOD_JSON) + 100_000}\r\n\r\n"
    ).encode()
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", server.http_port), timeout=5) as sock:
            sock.sendall(head + GOOD_JSON)
    good_request_works(server)


def test_bad_request_keeps_the_connection_for_the_next(server: RunningServer) -> None:
    """A 400 from the inference endpoint is an answer, not a broken connection: keep-alive goes on."""

    def request(body: bytes) -> bytes:
        return (
            f"POST {infer_path()} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    with socket.create_connection(("127.0.0.1", server.http_port), timeout=5) as sock:
        sock.sendall(
            request(b"{bad")
            + request(GOOD_JSON)
            + b"GET /v2/health/live HTTP/1.1\r\nConnection: close\r\n\r\n"
        )
        answer = read_response(sock)
    assert answer.count(b"HTTP/1.1 400 ") == 1
    assert answer.count(b"HTTP/1.1 200 ") == 2
    assert answer.index(b"HTTP/1.1 400 ") < answer.index(b"HTTP/1.1 200 ")


# -- logging: one line per failed request, no traceback ----------------------------------------------------------


def _wait_for(predicate: Callable[[], bool], timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_each_failed_request_is_logged_once(server: RunningServer) -> None:
    marker = f"log-once-{uuid.uuid4().hex}"
    body = {**_inputs(("INPUT0", [1, 16], "FP32"), ("INPUT1", [1, 16], "INT32")), "id": marker}
    for _ in range(3):
        assert post(server, infer_path(), body).status_code == 400

    def lines() -> list[str]:
        return [line for line in server.log().splitlines() if marker in line]

    assert _wait_for(lambda: len(lines()) >= 3)
    time.sleep(0.2)  # a duplicate line would come right behind
    assert len(lines()) == 3
    assert all("data-type is 'FP32'" in line for line in lines())


# -- size limits: a second, small server ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_server(
    main_repository: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("small") / "server.log"
    with running_server([main_repository], log, "--http-max-input-size=1024") as running:
        yield running
    assert "Traceback" not in log.read_text()


def _limit_message(kind: str, size: str = "", after: str = "") -> str:
    return (
        f"{kind}{size} exceeds the maximum allowed value of 1024 bytes{after}. Use --http-max-input-size to "
        "increase the limit."
    )


def test_oversized_json_body(small_server: RunningServer) -> None:
    body = json.dumps({"inputs": [inp("INPUT0", [1, 600], "UINT8", [1] * 600)]}).encode()
    assert len(body) > 1024
    r = post(small_server, infer_path(U8), body)
    assert_error(r, 400, _limit_message("Request JSON size", f" of {len(body)} bytes"))
    assert r.headers["Connection"] == "close"
    small = post(small_server, infer_path(U8), {"inputs": [inp("INPUT0", [1, 3], "UINT8", [1, 2, 3])]})
    assert small.status_code == 200


def test_oversized_binary_body(small_server: RunningServer) -> None:
    body, headers = binary_body({"inputs": [bds("INPUT0", [1, 2000], 2000, "UINT8")]}, bytes(2000))
    assert_error(
        post(small_server, infer_path(U8), body, headers),
        400,
        _limit_message("Request size", f" of {len(body)} bytes"),
    )


def test_oversized_chunked_body(small_server: RunningServer) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(100):
            yield b" " * 100

    r = requests.post(f"http://{small_server.http_url}{infer_path(U8)}", data=chunks(), timeout=10)
    assert_error(r, 400, _limit_message("Request JSON size"))


def test_gzip_bomb(small_server: RunningServer) -> None:
    bomb = gzip.compress(b" " * 900_000, compresslevel=9)  # about 900 bytes, inflating 1000-fold
    assert len(bomb) < 1024
    r = post(small_server, infer_path(U8), bomb, {"Content-Encoding": "gzip"})
    assert_error(r, 400, _limit_message("Request JSON size", after=" after decompression"))
    good = post(
        small_server,
        infer_path(U8),
        gzip.compress(json.dumps({"inputs": [inp("INPUT0", [1, 3], "UINT8", [1, 2, 3])]}).encode()),
        {"Content-Encoding": "gzip"},
    )
    assert good.status_code == 200
    assert good.json()["outputs"][0]["data"] == [1, 2, 3]


# -- slow and idle clients ---------------------------------------------------------------------------------------


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection; fails if it has not within 30 s."""
    sock.settimeout(30)
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except TimeoutError:
        pytest.fail(f"the server kept the connection open; it sent {b''.join(chunks)[:200]!r}")
    return b"".join(chunks)


@pytest.fixture(scope="module")
def impatient_server(
    main_repository: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("impatient") / "server.log"
    flags = ("--http-request-timeout-secs=1", "--http-idle-timeout-secs=2")
    with running_server([main_repository], log, *flags) as running:
        yield running
    assert "Traceback" not in log.read_text()


def test_slow_and_idle_connections_are_closed_while_others_are_served(
    impatient_server: RunningServer,
) -> None:
    server = impatient_server
    opened = []
    for first_bytes in (
        b"",  # says nothing
        b"POST " + infer_path().encode() + b" HTTP/1.1\r\nHost: x\r\nX-Slow",  # a slowloris head
        b"POST "
        + infer_path().encode()
        + b" HTTP/1.1\r\nContent-Length: 1000000000\r\n\r\n{",  # a body that stops
        b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n",  # answered, then idle on keep-alive
    ):
        sock = socket.create_connection(("127.0.0.1", server.http_port), timeout=30)
        sock.sendall(first_bytes)
        opened.append(sock)
    good_request_works(server)  # served meanwhile
    answers = []
    for sock in opened:
        with sock:
            answers.append(read_until_closed(sock))
    silent, slow_head, stopped_body, idle = answers
    assert silent == b""
    assert slow_head.startswith(b"HTTP/1.1 408 ") and b"did not arrive in 1 s" in slow_head
    assert (
        stopped_body.startswith(b"HTTP/1.1 408 ") and b"no byte of the request's body for 1 s" in stopped_body
    )
    assert idle.startswith(b"HTTP/1.1 200 ") and idle.count(b"HTTP/1.1 ") == 1
    good_request_works(server)


@pytest.fixture(scope="module")
def crowded_server(
    main_repository: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("crowded") / "server.log"
    with running_server([main_repository], log, "--http-max-connections=2") as running:
        yield running
    assert "Traceback" not in log.read_text()


def test_connections_past_the_limit_are_refused_and_the_others_served(
    crowded_server: RunningServer, frontend_processes: int
) -> None:
    server = crowded_server
    # Each serving process takes 2: one more than all of them together must be refused.
    held = [
        socket.create_connection(("127.0.0.1", server.http_port), timeout=30)
        for _ in range(2 * max(1, frontend_processes))
    ]
    refused = 0
    try:
        for sock in held:  # those accepted answer on the connection they hold
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        answers = [sock.recv(4096) for sock in held]
        extra = socket.create_connection(("127.0.0.1", server.http_port), timeout=30)
        with extra:
            # Refused at once (an answer, then the end); or, where the kernel gave the held ones unevenly to the
            # processes (one of them was refused then), accepted by a process with room, and silent.
            readable, _, _ = select.select([extra], [], [], 10)
            answer = read_until_closed(extra) if readable else b""
        refused += answer.startswith(b"HTTP/1.1 503 ")
        refused += sum(a.startswith(b"HTTP/1.1 503 ") for a in answers)  # the kernel may spread them unevenly
        assert refused >= 1
        assert b"--http-max-connections" in answer or any(b"--http-max-connections" in a for a in answers)
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 30
    while (
        good := requests.post(f"http://{server.http_url}{infer_path()}", json=two(), timeout=30)
    ).status_code == 503:
        assert time.monotonic() < deadline  # until the server has seen the held connections close
        time.sleep(0.1)
    assert good.status_code == 200
    assert "new connection(s): 2 HTTP connections are open" in server.log()


def test_a_flood_of_tiny_chunks_is_read_in_bounded_memory(server: RunningServer) -> None:
    """Triton's 2025 advisory: a body of many tiny chunks overflowed its stack. Here 200,000 chunks of one byte
    are one body like any other: read, joined once, answered."""
    body = GOOD_JSON
    chunks = b"".join(b"1\r\n" + body[i : i + 1] + b"\r\n" for i in range(len(body)))
    padding = b"1\r\n \r\n" * (200_000 - len(body))  # JSON allows whitespace after the document
    head = (
        f"POST {infer_path()} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    ).encode()
    answer = send_and_read(server, head + chunks + padding + b"0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["outputs"][0]["data"] == [2 * i for i in range(16)]


def test_a_client_that_reads_no_answer_holds_back_only_its_own_connection(server: RunningServer) -> None:
    """Pipelined 256 KB requests from a client that reads none of the answers: the server stops reading from it
    (32 requests held, then the kernel's buffers are full), so of the 100 MB it tries to send only a bounded part
    gets in; others are served meanwhile; once it reads, every request it sent is answered, in order."""
    values = np.arange(32768, dtype=np.float64)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1, values.size],
                    "datatype": "FP64",
                    "parameters": {"binary_data_size": values.nbytes},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    body = header + values.tobytes()
    request = (
        f"POST {infer_path('identity_fp64')} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
        f"Inference-Header-Content-Length: {len(header)}\r\n\r\n"
    ).encode() + body
    stream = request * 400
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=60) as sock:
        sock.setblocking(False)
        sent = 0
        while sent < len(stream):
            try:
                sent += sock.send(stream[sent : sent + 65536])
            except BlockingIOError:
                _, writable, _ = select.select([], [sock], [], 2.0)
                if not writable:
                    break  # the server has stopped reading from this connection
        assert sent < 50 << 20, f"the server read {sent >> 20} MB from a client that reads nothing"
        good_request_works(server)  # another client, served meanwhile
        started = -(-sent // len(request))  # requests begun: the last one may be partly sent
        sock.setblocking(True)
        rest = threading.Thread(target=sock.sendall, args=(stream[sent : started * len(request)],))
        rest.start()
        reader = sock.makefile("rb")
        for _ in range(started):
            head = reader.readline()
            assert head.startswith(b"HTTP/1.1 200 "), head
            length = 0
            while (line := reader.readline()) != b"\r\n":
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            answer = reader.read(length)
            assert answer.endswith(values.tobytes())
        rest.join()
    good_request_works(server)
