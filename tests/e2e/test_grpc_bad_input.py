"""Bad input over gRPC: each mistake gets the right status code with Triton's wording; the server keeps serving.

Requests tritonclient refuses to build are sent through the raw stubs. Messages are Triton's (2.51, checked
against the real tritonserver) unless a comment says why not. After every test the server must still answer a
good request and its log must hold no traceback.
"""

from __future__ import annotations

import queue
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from e2e.server_process import RunningServer, running_server

# Served by the engine in every --frontend-processes mode: run in mode 0 alone (tests/e2e/conftest.py).

INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
ID = "[request id: <id_unknown>] "
A = np.arange(16, dtype=np.int32).tobytes()
BATCH_NOTE = (
    " NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to "
    "each input shape. If you want to specify the full shape including the batch dim in your input dims config, "
    "try setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size."
)
TRITON_RESERVED = (
    "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with "
    "'triton_' are allowed: triton_enable_empty_final_response"
)


@pytest.fixture(scope="module")
def channel(server: RunningServer, frontend_processes: int) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.grpc_url) as ch:
        yield ch


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel, frontend_processes: int) -> service_pb2_grpc.GRPCInferenceServiceStub:
    return service_pb2_grpc.GRPCInferenceServiceStub(channel)


@pytest.fixture(scope="module")
def client(server: RunningServer, frontend_processes: int) -> Iterator[grpcclient.InferenceServerClient]:
    c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.close()


def _set(param: Any, value: Any, kind: str = "") -> None:
    kind = (
        kind
        or {bool: "bool_param", int: "int64_param", str: "string_param", float: "double_param"}[type(value)]
    )
    setattr(param, kind, value)


def request(
    model: str = "simple",
    inputs: list[dict[str, Any]] | None = None,
    raw: list[bytes] | None = None,
    outputs: list[str | tuple[str, dict[str, Any]]] = (),  # type: ignore[assignment]
    params: dict[str, Any] | None = None,
    version: str = "",
    request_id: str = "",
) -> Any:
    """A ModelInferRequest; inputs default to simple's INPUT0/INPUT1 [1,16] INT32.

    Without `raw` each input without typed contents gets the 64 bytes of a [1,16] INT32 tensor.
    """
    msg = service_pb2.ModelInferRequest(model_name=model, model_version=version, id=request_id)
    inputs = inputs if inputs is not None else [{"name": "INPUT0"}, {"name": "INPUT1"}]
    if raw is None:
        raw = [] if any("contents" in spec for spec in inputs) else [A] * len(inputs)
    for spec in inputs:
        tensor = msg.inputs.add(
            name=spec["name"], datatype=spec.get("datatype", "INT32"), shape=spec.get("shape", [1, 16])
        )
        for field, values in spec.get("contents", {}).items():
            getattr(tensor.contents, field).extend(values)
        for key, value in spec.get("params", {}).items():
            _set(tensor.parameters[key], value)
    for out in outputs:
        name, out_params = (out, {}) if isinstance(out, str) else out
        requested = msg.outputs.add(name=name)
        for key, value in out_params.items():
            _set(requested.parameters[key], value)
    for key, value in (params or {}).items():
        if isinstance(value, tuple):
            _set(msg.parameters[key], value[1], value[0])
        else:
            _set(msg.parameters[key], value)
    msg.raw_input_contents.extend(raw)
    return msg


def good_request_works(stub: Any) -> None:
    response = stub.ModelInfer(request(), timeout=10)
    assert [o.name for o in response.outputs] == ["OUTPUT0", "OUTPUT1"]
    np.testing.assert_array_equal(np.frombuffer(response.raw_output_contents[0], np.int32), 2 * np.arange(16))


@pytest.fixture(autouse=True)
def still_serving(server: RunningServer, stub: Any) -> Iterator[None]:
    """Whatever a test sent, the server answers a good request afterwards and logged no traceback."""
    yield
    good_request_works(stub)
    assert "Traceback" not in server.log()


def expect_error(call: Callable[[], Any], code: grpc.StatusCode, message: str) -> None:
    with pytest.raises(grpc.RpcError) as e:
        call()
    assert e.value.code() == code, e.value.details()
    assert e.value.details() == message


def typed(
    name: str, field: str, values: list[Any], shape: list[int] | None = None, datatype: str = "INT32"
) -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": shape or [1, 16], "contents": {field: values}}


I0, I1 = {"name": "INPUT0"}, {"name": "INPUT1"}
U8 = "identity_uint8"
BYTES = "identity_bytes"

# name -> (request, status code, details)
CASES: dict[str, tuple[Any, grpc.StatusCode, str]] = {
    "unknown model": (request("nope"), NOT_FOUND, "Request for unknown model: 'nope' is not found"),
    "empty model name": (request(""), NOT_FOUND, "Request for unknown model: '' is not found"),
    "unknown version": (
        request(version="7"),
        NOT_FOUND,
        "Request for unknown model: 'simple' version 7 is not found",
    ),
    "non-numeric version": (
        request(version="abc"),
        INVALID,
        "failed to get model version from specified version string 'abc' (details: stol), "
        "version should be an integral value > 0",
    ),
    # Triton's std::stol reads "1abc" as 1; trailing garbage is refused here.
    "version with trailing garbage": (
        request(version="1abc"),
        INVALID,
        "failed to get model version from specified version string '1abc' (details: "
        "stol), version should be an integral value > 0",
    ),
    "version past int64": (
        request(version="99999999999999999999"),
        INVALID,
        "failed to get model version from specified version string '99999999999999999999' "
        "(details: stol), version should be an integral value > 0",
    ),
    "negative version": (
        request(version="-1"),
        INVALID,
        "invalid model version specified '-1' , version should be an integral value > 0",
    ),
    "fewer raw contents than inputs": (
        request(inputs=[I0, I1], raw=[A]),
        INVALID,
        "unable to find data for input tensor 'INPUT1' for model 'simple' in request.",
    ),
    # Triton ignores the extra blobs.
    "more raw contents than inputs": (
        request(inputs=[I0, I1], raw=[A, A, A]),
        INVALID,
        "unexpected additional input data for model 'simple': 3 raw_input_contents for 2 inputs",
    ),
    "no data at all": (
        request(inputs=[I0, I1], raw=[]),
        INVALID,
        "unable to find data for input tensor 'INPUT0' for model 'simple' in request.",
    ),
    "raw contents of the wrong size": (
        request(inputs=[I0, I1], raw=[A, A[:-4]]),
        INVALID,
        ID + "input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got 60",
    ),
    "typed contents with too few elements": (
        request(
            inputs=[
                typed("INPUT0", "int_contents", list(range(15))),
                typed("INPUT1", "int_contents", list(range(16))),
            ]
        ),
        INVALID,
        ID + "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60",
    ),
    "typed contents in the wrong field": (
        request(
            inputs=[
                typed("INPUT0", "fp32_contents", [1.0] * 16),
                typed("INPUT1", "int_contents", list(range(16))),
            ]
        ),
        INVALID,
        "unexpected explicit tensor data for input tensor 'INPUT0' for "
        "model 'simple' of type 'FP32', expected datatype 'INT32'",
    ),
    "typed contents in two fields": (
        request(
            inputs=[
                {
                    "name": "INPUT0",
                    "contents": {"int_contents": list(range(16)), "fp32_contents": [1.0] * 16},
                },
                typed("INPUT1", "int_contents", list(range(16))),
            ]
        ),
        INVALID,
        "unexpected explicit tensor data for input tensor 'INPUT0' for model "
        "'simple', binary data was already supplied.",
    ),
    "typed contents and raw contents": (
        request(inputs=[typed("INPUT0", "int_contents", list(range(16))), I1], raw=[A, A]),
        INVALID,
        "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple'",
    ),
    "FP16 in typed contents": (
        request("identity_fp16", [typed("INPUT0", "fp32_contents", [1.0], [1, 1], "FP16")]),
        INVALID,
        "unexpected explicit tensor data for input tensor 'INPUT0' for model "
        "'identity_fp16' of type 'FP32', expected datatype 'FP16'",
    ),
    "UINT8 in int_contents": (
        request(U8, [typed("INPUT0", "int_contents", [1], [1, 1], "UINT8")]),
        INVALID,
        "unexpected explicit tensor data for input tensor 'INPUT0' for model 'identity_uint8' "
        "of type 'INT32', expected datatype 'UINT8'",
    ),
    # Triton keeps the low byte (300 becomes 44); a value that does not fit is refused here.
    "300 for UINT8": (
        request(U8, [typed("INPUT0", "uint_contents", [300], [1, 1], "UINT8")]),
        INVALID,
        "a value of input 'INPUT0' is out of range for UINT8",
    ),
    "BOOL typed contents with too few elements": (
        request("identity_bool", [typed("INPUT0", "bool_contents", [True], [1, 2], "BOOL")]),
        INVALID,
        ID + "input byte size mismatch for input 'INPUT0' for model 'identity_bool'. Expected 2, got 1",
    ),
    "BYTES typed contents with too few elements": (
        request(BYTES, [typed("INPUT0", "bytes_contents", [b"a"], [1, 2], "BYTES")]),
        INVALID,
        ID + "expected 2 string elements for inference input 'INPUT0' for model 'identity_bytes', got 1",
    ),
    "BYTES typed contents with too many elements": (
        request(BYTES, [typed("INPUT0", "bytes_contents", [b"a", b"b"], [1, 1], "BYTES")]),
        INVALID,
        ID + "unexpected number of string elements 2 for inference "
        "input 'INPUT0' for model 'identity_bytes', expecting 1",
    ),
    "BYTES with a truncated length prefix": (
        request(BYTES, [{"name": "INPUT0", "datatype": "BYTES", "shape": [1, 1]}], [b"\x05\x00\x00"]),
        INVALID,
        ID + "incomplete string length indicator for inference input "
        "'INPUT0' for model 'identity_bytes', expecting 4 bytes but only 3 bytes "
        "available. Please make sure the string length indicator is in one "
        "buffer.",
    ),
    "BYTES with a truncated element": (
        request(BYTES, [{"name": "INPUT0", "datatype": "BYTES", "shape": [1, 1]}], [b"\x05\x00\x00\x00ab"]),
        INVALID,
        "incomplete string data for inference input 'INPUT0', expecting "
        "string of length 5 but only 2 bytes available",
    ),
    "BYTES shape claiming 2**40 elements": (
        request(BYTES, [{"name": "INPUT0", "datatype": "BYTES", "shape": [1, 2**40]}], [bytes(4)]),
        INVALID,
        ID + "expected 1099511627776 string elements for inference input "
        "'INPUT0' for model 'identity_bytes', got 1",
    ),
    "invalid datatype": (
        request(inputs=[{"name": "INPUT0", "datatype": "INT33"}, I1]),
        INVALID,
        "invalid datatype for input INPUT0",
    ),
    "negative dim": (
        request(inputs=[{"name": "INPUT0", "shape": [1, -1]}, I1]),
        INVALID,
        ID + "All input dimensions should be specified for input 'INPUT0' for model 'simple', got [1,-1]",
    ),
    # More dimensions than numpy allows (64): once UNKNOWN with numpy's message.
    "raw tensor of 65 dims": (
        request(inputs=[{"name": "INPUT0", "shape": [1] * 64 + [16]}, I1]),
        INVALID,
        ID + "input 'INPUT0' for model 'simple' has 65 dimensions, more than the 64 a tensor can have",
    ),
    "typed tensor of 65 dims": (
        request(
            inputs=[
                typed("INPUT0", "int_contents", list(range(16)), [1] * 64 + [16]),
                typed("INPUT1", "int_contents", list(range(16))),
            ]
        ),
        INVALID,
        ID + "input 'INPUT0' for model 'simple' has 65 dimensions, more than the 64 a tensor can have",
    ),
    "dims whose product overflows": (
        request(inputs=[{"name": "INPUT0", "shape": [2**62, 2**62]}, I1]),
        INVALID,
        ID + "input 'INPUT0' for model 'simple' has shape "
        "[4611686018427387904,4611686018427387904], too large for any tensor",
    ),
    "typed dims whose product overflows": (
        request(
            inputs=[
                typed("INPUT0", "int_contents", [1], [2**62, 2**62]),
                typed("INPUT1", "int_contents", list(range(16))),
            ]
        ),
        INVALID,
        ID + "input 'INPUT0' for model 'simple' has shape "
        "[4611686018427387904,4611686018427387904], too large for any tensor",
    ),
    "empty tensor with enormous dims": (
        request(U8, [{"name": "INPUT0", "datatype": "UINT8", "shape": [2**62, 2**62, 0]}], [b""]),
        INVALID,
        ID + "input 'INPUT0' for model 'identity_uint8' has shape "
        "[4611686018427387904,4611686018427387904,0], too large for any tensor",
    ),
    "unknown input": (
        request(inputs=[I0, {"name": "INPUT9"}]),
        INVALID,
        "unexpected inference input 'INPUT9' for model 'simple'",
    ),
    "an input too many": (
        request(inputs=[I0, I1, {"name": "INPUT9"}], raw=[A, A, A]),
        INVALID,
        ID + "expected 2 inputs but got 3 inputs for model 'simple'. Got input(s) "
        "['INPUT0','INPUT1','INPUT9'], but missing required input(s) []. Please provide all "
        "required input(s).",
    ),
    "missing required input": (
        request(inputs=[I0], raw=[A]),
        INVALID,
        ID + "expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], "
        "but missing required input(s) ['INPUT1']. Please provide all required input(s).",
    ),
    "duplicate input": (
        request(inputs=[I0, I0, I1], raw=[A, A, A]),
        INVALID,
        ID + "input 'INPUT0' already exists in request",
    ),
    "wrong datatype": (
        request(inputs=[{"name": "INPUT0", "datatype": "FP32"}, I1]),
        INVALID,
        ID + "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'",
    ),
    "wrong shape": (
        request(inputs=[{"name": "INPUT0", "shape": [2, 8]}, {"name": "INPUT1", "shape": [2, 8]}]),
        INVALID,
        ID + "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got "
        "[2,8]." + BATCH_NOTE,
    ),
    "shape without the batch dim": (
        request(inputs=[{"name": "INPUT0", "shape": [16]}, {"name": "INPUT1", "shape": [16]}]),
        INVALID,
        ID + "inference request batch-size must be <= 8 for 'simple'",
    ),
    "scalar input to a batching model": (
        request(
            inputs=[{"name": "INPUT0", "shape": []}, {"name": "INPUT1", "shape": []}], raw=[A[:4], A[:4]]
        ),
        INVALID,
        ID + "input 'INPUT0' has no shape but model requires batch dimension for 'simple'",
    ),
    "batch larger than max_batch_size": (
        request(
            inputs=[{"name": "INPUT0", "shape": [9, 16]}, {"name": "INPUT1", "shape": [9, 16]}],
            raw=[A * 9, A * 9],
        ),
        INVALID,
        ID + "inference request batch-size must be <= 8 for 'simple'",
    ),
    "mismatched batch sizes": (
        request(inputs=[I0, {"name": "INPUT1", "shape": [2, 16]}], raw=[A, A * 2]),
        INVALID,
        ID + "input 'INPUT1' batch size does not match other inputs for 'simple'",
    ),
    "unknown output": (
        request(outputs=["OUTPUT9"]),
        INVALID,
        "unexpected inference output 'OUTPUT9' for model 'simple'",
    ),
    # Triton 2.51 answers the output once; asking twice is refused here.
    "duplicate output": (
        request(outputs=["OUTPUT0", "OUTPUT0"]),
        INVALID,
        ID + "output 'OUTPUT0' is requested more than once",
    ),
    "request parameter triton_": (request(params={"triton_x": 1}), INVALID, TRITON_RESERVED),
    "output parameter triton_": (
        request(outputs=[("OUTPUT0", {"triton_x": 1})]),
        INVALID,
        "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.",
    ),
    "input parameter triton_": (
        request(inputs=[{"name": "INPUT0", "params": {"triton_x": True}}, I1], raw=[A, A]),
        INVALID,
        "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.",
    ),
    "sequence_id of the wrong type": (
        request(params={"sequence_id": True}),
        INVALID,
        "invalid value type for 'sequence_id' parameter, expected int64_param or string_param.",
    ),
    "sequence_start of the wrong type": (
        request(params={"sequence_start": 1}),
        INVALID,
        "invalid value type for 'sequence_start' parameter, expected bool_param.",
    ),
    "priority of the wrong type": (
        request(params={"priority": "high"}),
        INVALID,
        "invalid value type for 'priority' parameter, expected int64_param or uint64_param.",
    ),
    "negative priority": (
        request(params={"priority": -1}),
        INVALID,
        "invalid value for 'priority', expected value >= 0.",
    ),
    "timeout of the wrong type": (
        request(params={"timeout": ("uint64_param", 5)}),
        INVALID,
        "invalid value type for 'timeout' parameter, expected int64_param.",
    ),
    "custom parameter of the wrong type": (
        request(params={"foo": ("uint64_param", 5)}),
        INVALID,
        "invalid value type for 'foo' parameter, expected int64_param, bool_param, or string_param.",
    ),
    "classification of the wrong type": (
        request(outputs=[("OUTPUT0", {"classification": "2"})]),
        INVALID,
        "invalid value type for 'classification' parameter, expected int64_param",
    ),
    "negative classification": (
        request(outputs=[("OUTPUT0", {"classification": -1})]),
        INVALID,
        "invalid value for 'classification' parameter, expected >= 0",
    ),
    "shared memory input without a byte size": (
        request(inputs=[{"name": "INPUT0", "params": {"shared_memory_region": "r"}}, I1]),
        INVALID,
        "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor "
        "'INPUT0'",
    ),
    "shared memory input, client shared memory disabled": (
        request(
            inputs=[
                {"name": "INPUT0", "params": {"shared_memory_region": "r", "shared_memory_byte_size": 64}},
                I1,
            ]
        ),
        grpc.StatusCode.UNIMPLEMENTED,
        "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_infer_request(stub: Any, case: str) -> None:
    msg, code, details = CASES[case]
    expect_error(lambda: stub.ModelInfer(msg, timeout=10), code, details)


def test_parameter_without_a_value(stub: Any) -> None:
    msg = request()
    msg.parameters["foo"].Clear()  # present in the map, no value set
    expect_error(
        lambda: stub.ModelInfer(msg, timeout=10),
        INVALID,
        "invalid value type for 'foo' parameter, expected int64_param, bool_param, or string_param.",
    )


def test_allowed_parameters_are_accepted(stub: Any) -> None:
    for params in (
        {"triton_enable_empty_final_response": True},
        {"foo": 1.5},
        {"sequence_id": "abc"},
        {"priority": ("uint64_param", 1)},
        {"timeout": 1000},
    ):
        response = stub.ModelInfer(request(params=params), timeout=10)
        assert len(response.outputs) == 2


def test_other_rpcs_status_codes(stub: Any) -> None:
    expect_error(
        lambda: stub.ModelMetadata(service_pb2.ModelMetadataRequest(name="nope"), timeout=10),
        NOT_FOUND,
        "Request for unknown model: 'nope' is not found",
    )
    expect_error(
        lambda: stub.ModelConfig(service_pb2.ModelConfigRequest(name="simple", version="9"), timeout=10),
        NOT_FOUND,
        "Request for unknown model: 'simple' version 9 is not found",
    )
    expect_error(
        lambda: stub.RepositoryModelLoad(
            service_pb2.RepositoryModelLoadRequest(model_name="simple"), timeout=10
        ),
        grpc.StatusCode.UNAVAILABLE,
        "explicit model load / unload is not allowed if polling is enabled",
    )
    expect_error(
        lambda: stub.ModelStatistics(service_pb2.ModelStatisticsRequest(name="nope"), timeout=10),
        NOT_FOUND,
        "Request for unknown model: 'nope' is not found",
    )
    expect_error(
        lambda: stub.TraceSetting(service_pb2.TraceSettingRequest(model_name="nope"), timeout=10),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Request for unknown model : nope",
    )


@pytest.mark.parametrize("version", ["abc", "-1", "99999999999999999999"])
def test_invalid_version_strings_on_every_rpc(stub: Any, version: str) -> None:
    for call in (
        lambda: stub.ModelMetadata(
            service_pb2.ModelMetadataRequest(name="simple", version=version), timeout=10
        ),
        lambda: stub.ModelConfig(service_pb2.ModelConfigRequest(name="simple", version=version), timeout=10),
        lambda: stub.ModelReady(service_pb2.ModelReadyRequest(name="simple", version=version), timeout=10),
    ):
        with pytest.raises(grpc.RpcError) as e:
            call()
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.details().endswith("version should be an integral value > 0")


def test_tritonclient_sees_status_codes(client: grpcclient.InferenceServerClient) -> None:
    a = grpcclient.InferInput("INPUT0", [1, 8], "INT32")
    a.set_data_from_numpy(np.zeros((1, 8), np.int32))
    b = grpcclient.InferInput("INPUT1", [1, 8], "INT32")
    b.set_data_from_numpy(np.zeros((1, 8), np.int32))
    with pytest.raises(InferenceServerException, match="unexpected shape for input 'INPUT0'") as e:
        client.infer("simple", [a, b])
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    with pytest.raises(InferenceServerException, match="Request for unknown model: 'nope' is not found") as e:
        client.infer("nope", [a, b])
    assert e.value.status() == "StatusCode.NOT_FOUND"


# -- streaming: a bad request yields an error_message, the stream goes on ----------------------------------------


def test_stream_bad_requests_do_not_end_the_stream(stub: Any) -> None:
    requests = [
        request(request_id="first"),
        request("nope", request_id="unknown-model"),
        request(inputs=[I0, I1], raw=[A, A[:-4]], request_id="short-raw"),
        request(outputs=["OUTPUT9"], request_id="unknown-output"),
        request(params={"triton_x": 1}, request_id="reserved"),
        request(inputs=[{"name": "INPUT0", "shape": [1] * 64 + [16]}, I1], request_id="65-dims"),
        request(request_id="last"),
    ]
    answers = list(stub.ModelStreamInfer(iter(requests), timeout=20))
    assert len(answers) == len(requests)
    # Requests of a stream run concurrently: answers come as they finish, so compare them as sets.
    assert {a.infer_response.id for a in answers if not a.error_message} == {"first", "last"}
    assert sorted(a.error_message for a in answers if a.error_message) == sorted(
        [
            "Request for unknown model: 'nope' is not found",
            "[request id: short-raw] input byte size mismatch for input 'INPUT1' for model 'simple'. "
            "Expected 64, got 60",
            "unexpected inference output 'OUTPUT9' for model 'simple'",
            TRITON_RESERVED,
            "[request id: 65-dims] input 'INPUT0' for model 'simple' has 65 dimensions, more than the 64 a "
            "tensor can have",
        ]
    )
    for answer in answers:
        if not answer.error_message:
            out = np.frombuffer(answer.infer_response.raw_output_contents[0], np.int32)
            np.testing.assert_array_equal(out, 2 * np.arange(16))


def test_stream_through_tritonclient(client: grpcclient.InferenceServerClient) -> None:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        good = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for tensor in good:
            tensor.set_data_from_numpy(np.ones((1, 16), np.int32))
        bad = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in bad:
            tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
        client.async_stream_infer("simple", bad, request_id="bad")
        for i in range(3):
            client.async_stream_infer("simple", good, request_id=f"good-{i}")
        outcomes = [results.get(timeout=10) for _ in range(4)]
    finally:
        client.stop_stream()
    errors = [error for result, error in outcomes if error is not None]
    assert len(errors) == 1
    assert (
        "[request id: bad] inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'"
        in str(errors[0])
    )
    ids = sorted(result.get_response().id for result, error in outcomes if error is None)
    assert ids == ["good-0", "good-1", "good-2"]


def test_stream_with_errors_as_status(channel: grpc.Channel, stub: Any) -> None:
    """`triton_grpc_error: true` at stream start: the first error ends the stream with its status."""
    call = stub.ModelStreamInfer(
        iter([request(request_id="a"), request("nope")]),
        timeout=20,
        metadata=(("triton_grpc_error", "true"),),
    )
    with pytest.raises(grpc.RpcError) as e:
        list(call)
    assert e.value.code() == NOT_FOUND
    assert e.value.details() == "Request for unknown model: 'nope' is not found"


# -- the transport itself ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "garbage",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\xff" * 64,
        bytes(range(256)) * 4,
    ],
)
def test_garbage_on_the_grpc_port(server: RunningServer, garbage: bytes) -> None:
    with socket.create_connection(("127.0.0.1", server.grpc_port), timeout=5) as sock:
        sock.sendall(garbage)
        sock.settimeout(5)
        try:
            while sock.recv(65536):
                pass
        except (TimeoutError, ConnectionResetError):
            pass


def test_client_cancelling_mid_stream(stub: Any) -> None:
    def forever() -> Iterator[Any]:
        yield request(request_id="one")
        yield request("nope")
        while True:  # never ends: the client cancels
            yield request(request_id="more")

    call = stub.ModelStreamInfer(forever(), timeout=20)
    seen = 0
    for _ in call:
        seen += 1
        if seen == 5:
            call.cancel()
            break
    assert seen == 5


# -- slow and idle clients ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def impatient_server(
    main_repository: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("impatient") / "server.log"
    flags = ("--grpc-idle-timeout-secs=1", "--grpc-request-timeout-secs=1")
    with running_server([main_repository], log, *flags) as running:
        yield running
    assert "Traceback" not in log.read_text()


def test_idle_and_silent_connections_are_closed_and_clients_reconnect(
    impatient_server: RunningServer,
) -> None:
    server = impatient_server
    silent = socket.create_connection(("127.0.0.1", server.grpc_port), timeout=30)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
        first = client.infer("simple", inputs).as_numpy("OUTPUT0")
        # The server closes both connections: the silent one after the request timeout, the client's once it
        # has had no call for the idle timeout (GOAWAY first).
        silent.settimeout(30)
        received = b""
        while chunk := silent.recv(65536):
            received += chunk
        assert received  # our SETTINGS, then a GOAWAY, then the close
        deadline = time.monotonic() + 30
        while (
            server.log().count("closing a gRPC connection idle for 1 s") < 2 and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        # tritonclient's channel reconnects by itself: the next call is served as if nothing happened.
        again = client.infer("simple", inputs).as_numpy("OUTPUT0")
        np.testing.assert_array_equal(first, again)
    finally:
        client.close()
        silent.close()
    assert server.log().count("closing a gRPC connection idle for 1 s") >= 2


def test_connections_past_their_age_are_replaced_without_a_failed_call(
    main_repository: Path, tmp_path: Path, frontend_processes: int
) -> None:
    flags = ("--grpc-max-connection-age=300", "--grpc-max-connection-age-grace=10000")
    with running_server([main_repository], tmp_path / "server.log", *flags) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
            for tensor in inputs:
                tensor.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
            deadline = time.monotonic() + 60
            while server.log().count("reached its maximum age") < 2:  # two connections aged out meanwhile
                out = client.infer("simple", inputs).as_numpy("OUTPUT0")
                np.testing.assert_array_equal(out, 2 * np.arange(16, dtype=np.int32).reshape(1, 16))
                assert time.monotonic() < deadline, server.log()[-2000:]
                time.sleep(0.05)
        finally:
            client.close()
        assert "Traceback" not in server.log()
