"""The python backend's `triton_python_backend_utils` module (pb_utils): Triton's API, with a fake runtime."""

from __future__ import annotations

import asyncio
import json
import re
import struct
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any

import numpy as np
import pytest

from modelhost.backends.python import pb_utils


class FakeRuntime:
    """Records what pb_utils asks of the stub; BLS answers are scripted."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, pb_utils.InferenceResponse | None, int]] = []
        self.cancelled: set[int] = set()
        self.logs: list[tuple[str, str, str, int]] = []
        self.families: list[tuple[str, str, str]] = []
        self.metrics: list[tuple[str, dict[str, str], list[float] | None]] = []
        self.updates: list[tuple[int, str, float]] = []
        self.values: dict[int, float] = {}
        self.controls: list[tuple[str, str, dict[str, Any]]] = []
        self.bls: list[tuple[pb_utils.InferenceRequest, bool, int]] = []
        self.bls_answer: Any = None
        self.fail_with: str | None = None

    def exec_bls(
        self, request: pb_utils.InferenceRequest, decoupled: bool, timeout_us: int
    ) -> pb_utils.InferenceResponse | pb_utils.ResponseIterator:
        self.bls.append((request, decoupled, timeout_us))
        return self.bls_answer  # type: ignore[no-any-return]

    def async_exec_bls(
        self, request: pb_utils.InferenceRequest, decoupled: bool
    ) -> Awaitable[pb_utils.InferenceResponse | AsyncIterator[pb_utils.InferenceResponse]]:
        self.bls.append((request, decoupled, 0))
        answer = self.bls_answer

        async def reply() -> Any:
            await asyncio.sleep(0)
            return answer

        return reply()

    def send_response(self, key: int, response: pb_utils.InferenceResponse | None, flags: int) -> None:
        self.sent.append((key, response, flags))

    def is_cancelled(self, key: int) -> bool:
        return key in self.cancelled

    def log(self, level: str, message: str, filename: str, line: int) -> None:
        self.logs.append((level, message, filename, line))

    def register_metric_family(self, name: str, description: str, kind: str) -> None:
        if self.fail_with:
            raise pb_utils.TritonModelException(self.fail_with)
        self.families.append((name, description, kind))

    def register_metric(self, family: str, labels: dict[str, str], buckets: list[float] | None) -> int:
        self.metrics.append((family, labels, buckets))
        return len(self.metrics)

    def update_metric(self, metric_id: int, op: str, value: float) -> None:
        if self.fail_with:
            raise pb_utils.TritonModelException(self.fail_with)
        self.updates.append((metric_id, op, value))
        self.values[metric_id] = self.values.get(metric_id, 0.0) + value if op != "set" else value

    def metric_value(self, metric_id: int) -> float:
        return self.values.get(metric_id, 0.0)

    def model_control(self, op: str, model_name: str, **kwargs: Any) -> Any:
        if self.fail_with:
            raise pb_utils.TritonModelException(self.fail_with)
        self.controls.append((op, model_name, kwargs))
        return True if op == "is_ready" else None


@pytest.fixture
def runtime() -> Iterator[FakeRuntime]:
    fake = FakeRuntime()
    pb_utils._set_runtime(fake)
    try:
        yield fake
    finally:
        pb_utils._set_runtime(None)


def server_request(
    key: int = 7, decoupled: bool = False, inputs: list[pb_utils.Tensor] | None = None
) -> pb_utils.InferenceRequest:
    return pb_utils.InferenceRequest._from_server(
        key=key,
        model_name="m",
        model_version=1,
        inputs=inputs or [],
        requested_output_names=["OUT"],
        request_id="r1",
        correlation_id=0,
        flags=0,
        timeout=0,
        parameters_json='{"p": 1}',
        decoupled=decoupled,
    )


def response(value: float = 1.0) -> pb_utils.InferenceResponse:
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value], dtype=np.float32))])


# -- constants and helpers --------------------------------------------------------------------------------------


def test_constants_have_tritons_values() -> None:
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START == 1
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END == 2
    assert pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL == 1
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE == 2
    # pb_utils' memory types are Triton's PreferredMemory::MemoryType (GPU first), not core's.
    assert pb_utils.TRITONSERVER_MEMORY_GPU == 0
    assert pb_utils.TRITONSERVER_MEMORY_CPU == 1
    assert pb_utils.TritonError.INTERNAL == 1
    assert pb_utils.TritonError.CANCELLED == 7
    assert [pb_utils.MetricFamily.COUNTER, pb_utils.MetricFamily.GAUGE, pb_utils.MetricFamily.HISTOGRAM] == [
        0,
        1,
        2,
    ]


def test_type_maps() -> None:
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.triton_string_to_numpy("TYPE_BOOL") is bool
    with pytest.raises(KeyError):
        pb_utils.triton_string_to_numpy("TYPE_BF16")
    for code in range(1, 14):
        numpy_type = pb_utils.triton_to_numpy_type(code)
        assert numpy_type is not None
        assert pb_utils.numpy_to_triton_type(numpy_type) == code
        assert pb_utils.numpy_to_triton_type(np.dtype(numpy_type)) == code
    assert pb_utils.triton_to_numpy_type(0) is None
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.numpy_to_triton_type(np.complex64) is None


def test_bytes_serialization_is_tritons_wire_format() -> None:
    array = np.array([[b"ab", b""], ["é", 5]], dtype=np.object_)
    encoded = pb_utils.serialize_byte_tensor(array)
    # Each element in C order, after its length as 4 bytes little-endian; str as UTF-8, others as their str().
    assert (
        encoded
        == b"\x02\x00\x00\x00ab" + b"\x00\x00\x00\x00" + b"\x02\x00\x00\x00\xc3\xa9" + b"\x01\x00\x00\x005"
    )
    assert isinstance(encoded, bytes)
    decoded = pb_utils.deserialize_bytes_tensor(encoded)
    assert decoded.dtype == np.object_ and decoded.shape == (4,)
    assert decoded.tolist() == [b"ab", b"", "é".encode(), b"5"]
    # The stub hands it numpy buffers too.
    assert (
        pb_utils.deserialize_bytes_tensor(np.frombuffer(encoded, dtype=np.uint8)).tolist() == decoded.tolist()
    )
    # np.bytes_ arrays drop trailing zero bytes (why Triton asks for object arrays); that is numpy's doing.
    assert pb_utils.serialize_byte_tensor(np.array([b"xy"], dtype="S2")) == b"\x02\x00\x00\x00xy"
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=np.object_)) == ()
    assert pb_utils.serialize_byte_tensor(np.array([1, 2], dtype=np.int32)) is None
    with pytest.raises(struct.error):
        pb_utils.deserialize_bytes_tensor(b"\x05\x00\x00\x00ab")


def test_get_tensor_and_config_by_name() -> None:
    tensor = pb_utils.Tensor("IN0", np.zeros(2, dtype=np.int32))
    request = server_request(inputs=[tensor])
    assert pb_utils.get_input_tensor_by_name(request, "IN0") is tensor
    assert pb_utils.get_input_tensor_by_name(request, "OPTIONAL_IN") is None  # an optional input not sent
    reply = response()
    assert pb_utils.get_output_tensor_by_name(reply, "OUT") is reply.output_tensors()[0]
    assert pb_utils.get_output_tensor_by_name(reply, "NOPE") is None
    config = {"input": [{"name": "IN0", "data_type": "TYPE_INT32"}], "output": [{"name": "OUT"}]}
    assert pb_utils.get_input_config_by_name(config, "IN0") == {"name": "IN0", "data_type": "TYPE_INT32"}
    assert pb_utils.get_input_config_by_name(config, "X") is None
    assert pb_utils.get_output_config_by_name(config, "OUT") == {"name": "OUT"}
    assert pb_utils.get_output_config_by_name({}, "OUT") is None
    assert pb_utils.using_decoupled_model_transaction_policy(config) is False
    assert pb_utils.using_decoupled_model_transaction_policy(
        {"model_transaction_policy": {"decoupled": True}}
    )


# -- Tensor -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "code"),
    [
        (np.bool_, 1),
        (np.uint8, 2),
        (np.uint16, 3),
        (np.uint32, 4),
        (np.uint64, 5),
        (np.int8, 6),
        (np.int16, 7),
        (np.int32, 8),
        (np.int64, 9),
        (np.float16, 10),
        (np.float32, 11),
        (np.float64, 12),
        (np.object_, 13),
        ("S3", 13),
    ],
)
def test_tensor_dtypes(dtype: Any, code: int) -> None:
    tensor = pb_utils.Tensor("t", np.zeros((2, 3), dtype=dtype))
    assert tensor.triton_dtype() == code
    assert tensor.shape() == [2, 3]
    assert tensor.name() == "t"
    assert tensor.is_cpu() is True


def test_tensor_keeps_contiguous_arrays_and_copies_the_others() -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert pb_utils.Tensor("a", array).as_numpy() is array  # the stub's shared-memory views stay views
    strided = pb_utils.Tensor("b", array.T).as_numpy()
    assert strided.flags.c_contiguous and np.array_equal(strided, array.T)
    assert pb_utils.Tensor("c", [1, 2, 3]).triton_dtype() == 9  # like pybind's py::array, lists are converted


def test_tensor_refuses_what_triton_refuses() -> None:
    with pytest.raises(pb_utils.TritonModelException, match=r"Tensor name cannot be an empty string."):
        pb_utils.Tensor("", np.zeros(1))
    for bad in (np.array(["text"]), np.zeros(2, dtype=np.complex64), np.zeros(1, dtype="datetime64[s]")):
        with pytest.raises(pb_utils.TritonModelException, match=r"NumPy dtype is not supported."):
            pb_utils.Tensor("x", bad)


def test_bytes_tensor() -> None:
    tensor = pb_utils.Tensor("s", np.array([b"a", b"bc"], dtype=np.object_))
    assert tensor.triton_dtype() == 13
    assert tensor.as_numpy().tolist() == [b"a", b"bc"]
    with pytest.raises(
        pb_utils.TritonModelException, match=r"DLPack does not have support for string tensors."
    ):
        tensor.to_dlpack()


def test_dlpack_round_trip_shares_memory() -> None:
    array = np.arange(6, dtype=np.int64).reshape(2, 3)
    tensor = pb_utils.Tensor("x", array)
    from_capsule = pb_utils.Tensor.from_dlpack("y", tensor.to_dlpack())
    assert from_capsule.name() == "y" and from_capsule.triton_dtype() == 9
    assert np.shares_memory(from_capsule.as_numpy(), array)
    from_object = pb_utils.Tensor.from_dlpack("z", array)  # anything with __dlpack__
    assert np.shares_memory(from_object.as_numpy(), array)
    assert np.shares_memory(np.from_dlpack(tensor), array)  # a Tensor is a DLPack producer itself
    readonly = array.copy()
    readonly.flags.writeable = False
    assert np.array_equal(
        pb_utils.Tensor.from_dlpack("r", pb_utils.Tensor("r", readonly).to_dlpack()).as_numpy(), array
    )
    with pytest.raises(pb_utils.TritonModelException, match=r"Tensor name cannot be an empty string."):
        pb_utils.Tensor.from_dlpack("", array)
    with pytest.raises(pb_utils.TritonModelException, match=r"must be a DLPack capsule"):
        pb_utils.Tensor.from_dlpack("x", [1, 2])
    with pytest.raises(pb_utils.TritonModelException, match=r"not contiguous"):
        pb_utils.Tensor.from_dlpack("x", array.T)


# -- auto-complete ----------------------------------------------------------------------------------------------


def model_config(**fields: Any) -> pb_utils.ModelConfig:
    return pb_utils.ModelConfig(
        json.dumps({"name": "m", "max_batch_size": 0, "input": [], "output": [], **fields})
    )


def test_model_config_auto_complete() -> None:
    config = model_config()
    config.set_max_batch_size(8)
    config.set_dynamic_batching()
    config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4]})
    config.add_input({"name": "OPT", "data_type": "TYPE_INT32", "dims": [1], "optional": True})
    config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]})
    config.set_model_transaction_policy({"decoupled": True})
    assert config.as_dict() == {
        "name": "m",
        "max_batch_size": 8,
        "dynamic_batching": {},
        "input": [
            {"name": "IN", "data_type": "TYPE_FP32", "dims": [4]},
            {"name": "OPT", "data_type": "TYPE_INT32", "dims": [1], "optional": True},
        ],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]}],
        "model_transaction_policy": {"decoupled": True},
    }
    # The stub builds it from a dict too.
    assert pb_utils.ModelConfig({"name": "x"}).as_dict() == {"name": "x"}


def test_model_config_errors_are_tritons() -> None:
    config = model_config(max_batch_size=16)
    with pytest.raises(
        ValueError, match=r"^configuration specified max_batch_size 16, but in auto-complete-config"
    ):
        config.set_max_batch_size(4)
    with pytest.raises(ValueError, match=r"tries to set scheduling_choice as 'dynamic_batching'"):
        model_config(sequence_batching={}).set_dynamic_batching()
    config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4]})
    with pytest.raises(
        ValueError,
        match=re.escape(
            "unable to load model 'm', configuration expects datatype TYPE_FP32 for input 'IN', model provides "
            "TYPE_INT8"
        ),
    ):
        config.add_input({"name": "IN", "data_type": "TYPE_INT8", "dims": [4]})
    with pytest.raises(ValueError, match=re.escape("the model expects dims [5] but the model configuration")):
        config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [5]})
    config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4]})  # the same again: no duplicate
    assert len(config.as_dict()["input"]) == 1
    with pytest.raises(
        ValueError, match=r"contains property other than 'name', 'data_type', 'dims' and 'optional'."
    ):
        config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [1], "format": "x"})
    with pytest.raises(ValueError, match=r"contains property other than 'name', 'data_type' and 'dims'."):
        config.add_output({"name": "X", "data_type": "TYPE_FP32", "dims": [1], "optional": True})
    with pytest.raises(
        ValueError, match=r"input 'X' in auto-complete-config function for model 'm' is missing 'dims'"
    ):
        config.add_input({"name": "X", "data_type": "TYPE_FP32"})
    with pytest.raises(ValueError, match=r"is missing 'name' property."):
        config.add_output({"data_type": "TYPE_FP32", "dims": [1]})
    # A config that names a tensor without a type: auto-complete fills it in.
    partial = model_config(output=[{"name": "OUT", "data_type": "TYPE_INVALID", "dims": []}])
    partial.add_output({"name": "OUT", "data_type": "TYPE_FP16", "dims": [2]})
    assert partial.as_dict()["output"] == [{"name": "OUT", "data_type": "TYPE_FP16", "dims": [2]}]
    decoupled = model_config(model_transaction_policy={"decoupled": False})
    with pytest.raises(ValueError, match=r"trying to change decoupled property .* already set to 'False'."):
        decoupled.set_model_transaction_policy({"decoupled": True})
    with pytest.raises(ValueError, match=r"contains property other than 'decoupled'."):
        decoupled.set_model_transaction_policy({"ordered": True})


# -- errors and responses ---------------------------------------------------------------------------------------


def test_triton_error_and_response() -> None:
    error = pb_utils.TritonError("bad input")
    assert error.message() == "bad input" and error.code() == pb_utils.TritonError.INTERNAL
    assert (
        pb_utils.TritonError("gone", pb_utils.TritonError.NOT_FOUND).code() == pb_utils.TritonError.NOT_FOUND
    )
    assert pb_utils.TritonError("from the wire", 4).code() == pb_utils.TritonError.UNAVAILABLE
    with pytest.raises(TypeError):
        pb_utils.TritonError("x", 99)
    failed = pb_utils.InferenceResponse(error=error)
    assert failed.has_error() and failed.error() is error and failed.output_tensors() == []
    ok = pb_utils.InferenceResponse(
        [pb_utils.Tensor("O", np.zeros(1))], parameters={"a": 1, "b": True, "c": "x"}
    )
    assert not ok.has_error() and ok.error() is None
    assert json.loads(ok.parameters()) == {"a": 1, "b": True, "c": "x"}
    assert pb_utils.InferenceResponse().parameters() == "{}"
    with pytest.raises(TypeError):
        pb_utils.InferenceResponse([np.zeros(1)])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        pb_utils.InferenceResponse(error="a string")  # type: ignore[arg-type]
    with pytest.raises(pb_utils.TritonModelException, match=r"values to have type bool/int/str"):
        pb_utils.InferenceResponse(parameters={"a": 1.5})  # type: ignore[dict-item]
    exception = pb_utils.TritonModelException("boom")
    assert str(exception) == "boom" and exception.message() == "boom"


# -- response sender --------------------------------------------------------------------------------------------


def test_decoupled_sender(runtime: FakeRuntime) -> None:
    request = server_request(key=3, decoupled=True)
    sender = request.get_response_sender()
    assert sender is request.get_response_sender()
    first, second = response(1), response(2)
    sender.send(first)
    sender.send(second)
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert runtime.sent == [(3, first, 0), (3, second, 0), (3, None, 1)]
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Unable to send response. Response sender has been closed.$"
    ):
        sender.send(response())
    assert sender._is_closed()


def test_sender_argument_checks(runtime: FakeRuntime) -> None:
    sender = server_request(decoupled=True).get_response_sender()
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Unable to send response. Unsupported flag provided.$"
    ):
        sender.send(response(), flags=2)
    with pytest.raises(
        pb_utils.TritonModelException,
        match=r"^Inference Response object must be provided when the response flags is set to zero.$",
    ):
        sender.send()
    with pytest.raises(TypeError):
        sender.send([response()])  # type: ignore[arg-type]
    assert runtime.sent == []
    # A final response closes the sender.
    sender.send(response(), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    with pytest.raises(pb_utils.TritonModelException, match=r"closed"):
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def test_default_mode_sender_sends_exactly_one_response(runtime: FakeRuntime) -> None:
    sender = server_request(decoupled=False).get_response_sender()
    with pytest.raises(
        pb_utils.TritonModelException,
        match=r"^Unable to send response. Non-decoupled model cannot send complete final before sending a response.$",
    ):
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    sender.send(response())
    with pytest.raises(
        pb_utils.TritonModelException,
        match=r"^Unable to send response. Non-decoupled model cannot send more than one response.$",
    ):
        sender.send(response())
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert [flags for _, _, flags in runtime.sent] == [0, 1]
    # What the stub does with a response that execute() returns after the sender already sent one.
    other = server_request(decoupled=False).get_response_sender()
    other.send(response(), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    with pytest.raises(pb_utils.TritonModelException):
        other._update_state(response(), pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def test_sender_of_a_bls_request_and_without_runtime() -> None:
    bls = pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[])
    with pytest.raises(
        pb_utils.TritonModelException, match=r"no reference to the decoupled state of the model"
    ):
        bls.get_response_sender().send(response())
    assert bls.is_cancelled() is False
    sender = server_request(decoupled=True).get_response_sender()
    with pytest.raises(pb_utils.TritonModelException, match=r"no Triton runtime is installed"):
        sender.send(response())
    assert sender._responses_sent() == 0  # a refused send does not count


def test_cancellation_goes_to_the_runtime(runtime: FakeRuntime) -> None:
    request = server_request(key=9, decoupled=True)
    assert not request.is_cancelled() and not request.get_response_sender().is_cancelled()
    runtime.cancelled.add(9)
    assert request.is_cancelled() and request.get_response_sender().is_cancelled()


# -- requests ---------------------------------------------------------------------------------------------------


def test_server_request_accessors() -> None:
    tensor = pb_utils.Tensor("IN", np.zeros(1, dtype=np.float32))
    request = server_request(key=5, inputs=[tensor])
    assert request.inputs() == [tensor]
    assert request.request_id() == "r1" and request.correlation_id() == 0 and request.flags() == 0
    assert request.requested_output_names() == ["OUT"] and request.timeout() == 0
    assert request.parameters() == '{"p": 1}' and request.model_name() == "m" and request.model_version() == 1
    assert request.trace().get_context() is None
    assert request._server_key() == 5
    assert request._release_flags() == pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL
    request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    assert request._release_flags() == pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE


def test_bls_request_names_may_be_bytes() -> None:
    # As pybind11 in Triton's stub: a model name read from a BYTES input (`as_numpy()[0]`) is bytes.
    request = pb_utils.InferenceRequest(
        model_name=np.array([b"simple"], dtype=np.object_)[0], requested_output_names=[], inputs=[]
    )
    assert request.model_name() == "simple"
    assert pb_utils.InferenceRequest(b"r", 0, [], [], "m").request_id() == "r"
    with pytest.raises(TypeError, match="model_name given as bytes must be UTF-8"):
        pb_utils.InferenceRequest(model_name=b"\xff", requested_output_names=[], inputs=[])


def test_bls_request_constructor() -> None:
    tensor = pb_utils.Tensor("IN", np.zeros(1, dtype=np.float32))
    request = pb_utils.InferenceRequest(
        model_name="add", requested_output_names=["OUT", "OUT"], inputs=[tensor], parameters={"k": "v"}
    )
    assert request.request_id() == "" and request.correlation_id() == 0 and request.model_version() == -1
    assert request.flags() == 0 and request.timeout() == 0 and request._server_key() is None
    assert request.requested_output_names() == ["OUT"]  # Triton keeps a set of names
    assert json.loads(request.parameters()) == {"k": "v"}
    assert (
        pb_utils.InferenceRequest(model_name="a", requested_output_names=[], inputs=[]).parameters() == "{}"
    )
    # A JSON object string is taken as it is.
    assert (
        pb_utils.InferenceRequest(
            model_name="a", requested_output_names=[], inputs=[], parameters='{"x": 1}'
        ).parameters()
        == '{"x": 1}'
    )
    stateful = pb_utils.InferenceRequest(
        "id",
        "corr",
        [tensor],
        ["OUT"],
        "add",
        2,
        pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
        1000,
        pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0),
    )
    assert (stateful.request_id(), stateful.correlation_id(), stateful.model_version()) == ("id", "corr", 2)
    assert (stateful.flags(), stateful.timeout()) == (1, 1000)


def test_bls_request_constructor_errors() -> None:
    with pytest.raises(TypeError, match=r"model_name"):
        pb_utils.InferenceRequest(requested_output_names=[], inputs=[])
    with pytest.raises(
        pb_utils.TritonModelException,
        match=r"^Requested output name for request with id 'r' and model name 'm' should not be empty.$",
    ):
        pb_utils.InferenceRequest(request_id="r", model_name="m", requested_output_names=[""], inputs=[])
    with pytest.raises(
        pb_utils.TritonModelException,
        match=r"^Input tensor for request with id '' and model name 'm' should not be",
    ):
        pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[None])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[np.zeros(1)])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        pb_utils.InferenceRequest(model_name="m", requested_output_names="OUT", inputs=[])
    with pytest.raises(pb_utils.TritonModelException, match=r"^Correlation ID must be integer or string$"):
        pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[], correlation_id=1.5)  # type: ignore[arg-type]
    with pytest.raises(pb_utils.TritonModelException, match=r"keys to have type str"):
        pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[], parameters={1: 2})  # type: ignore[dict-item]
    with pytest.raises(pb_utils.TritonModelException, match=r"^Expect dict"):
        pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[], parameters=[1])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[], timeout=-1)
    with pytest.raises(TypeError):
        pb_utils.PreferredMemory("GPU")  # type: ignore[arg-type]


def test_exec_goes_through_the_runtime(runtime: FakeRuntime) -> None:
    request = pb_utils.InferenceRequest(
        model_name="add",
        requested_output_names=["OUT"],
        inputs=[pb_utils.Tensor("IN", np.ones(2))],
        timeout=500,
    )
    answer = response(3)
    runtime.bls_answer = answer
    assert request.exec() is answer
    assert runtime.bls[-1] == (request, False, 500)
    # An error is an answer, not an exception.
    runtime.bls_answer = pb_utils.InferenceResponse(
        error=pb_utils.TritonError("no model", pb_utils.TritonError.NOT_FOUND)
    )
    failed = request.exec()
    assert isinstance(failed, pb_utils.InferenceResponse) and failed.has_error()


def test_decoupled_exec_returns_a_response_iterator(runtime: FakeRuntime) -> None:
    cancels: list[bool] = []

    class Stream:
        def __init__(self) -> None:
            self._items = iter([response(1), response(2)])

        def __iter__(self) -> Stream:
            return self

        def __next__(self) -> pb_utils.InferenceResponse:
            return next(self._items)

        def cancel(self) -> None:
            cancels.append(True)

    runtime.bls_answer = Stream()
    request = pb_utils.InferenceRequest(model_name="gen", requested_output_names=["OUT"], inputs=[])
    responses = request.exec(decoupled=True)
    assert isinstance(responses, pb_utils.ResponseIterator)
    values = [float(r.output_tensors()[0].as_numpy()[0]) for r in responses]
    assert values == [1.0, 2.0]
    assert runtime.bls[-1][1] is True
    # As in Triton, iterating again after the last response replays them.
    assert len(list(responses)) == 2
    responses.cancel()
    assert cancels == [True]


def test_async_exec(runtime: FakeRuntime) -> None:
    answer = response(5)
    runtime.bls_answer = answer
    request = pb_utils.InferenceRequest(model_name="add", requested_output_names=["OUT"], inputs=[])

    async def execute() -> Any:
        first, second = await asyncio.gather(request.async_exec(), request.async_exec())
        return first, second

    assert asyncio.run(execute()) == (answer, answer)
    runtime.bls_answer = iter([answer])

    async def stream() -> Any:
        return await request.async_exec(decoupled=True)

    responses = asyncio.run(stream())
    assert isinstance(responses, pb_utils.ResponseIterator) and list(responses) == [answer]
    with pytest.raises(RuntimeError):
        request.async_exec()  # as in Triton: only inside a coroutine


def test_bls_without_runtime() -> None:
    request = pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[])
    with pytest.raises(pb_utils.TritonModelException, match=r"no Triton runtime is installed"):
        request.exec()


# -- logger -----------------------------------------------------------------------------------------------------


def test_logger_falls_back_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    pb_utils.Logger.log_warn("careful")
    line = capsys.readouterr().err
    assert re.fullmatch(r"W\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ test_pb_utils\.py:\d+\]  careful\n", line), line
    pb_utils.Logger.log("plain")
    assert capsys.readouterr().err.startswith("I")
    pb_utils.Logger.log("bad", pb_utils.Logger.ERROR)
    assert capsys.readouterr().err.startswith("E")


def test_logger_sends_the_models_call_site(runtime: FakeRuntime) -> None:
    pb_utils.Logger.log_info("one")
    pb_utils.Logger.log_error("two")
    pb_utils.Logger.log_verbose("three")
    pb_utils.Logger.log("four", pb_utils.Logger.LogLevel.WARNING)
    assert [(level, message) for level, message, _, _ in runtime.logs] == [
        ("INFO", "one"),
        ("ERROR", "two"),
        ("VERBOSE", "three"),
        ("WARNING", "four"),
    ]
    assert all(filename == __file__ and line > 0 for _, _, filename, line in runtime.logs)


# -- metrics ----------------------------------------------------------------------------------------------------


def test_metric_family_and_metrics(runtime: FakeRuntime) -> None:
    family = pb_utils.MetricFamily("requests_total", "Requests", pb_utils.MetricFamily.COUNTER)
    assert runtime.families == [("requests_total", "Requests", "COUNTER")]
    counter = family.Metric(labels={"model": "m"})
    counter.increment(2)
    counter.increment(0.5)
    assert counter.value() == 2.5
    assert runtime.metrics == [("requests_total", {"model": "m"}, None)]
    gauge = pb_utils.MetricFamily("queue", "Queue", pb_utils.MetricFamily.GAUGE).Metric()
    gauge.set(4)
    gauge.increment(-1)
    histogram = pb_utils.MetricFamily("latency", "Latency", pb_utils.MetricFamily.HISTOGRAM).Metric(
        labels={}, buckets=[0.1, 1.0]
    )
    histogram.observe(0.3)
    assert runtime.metrics[-1] == ("latency", {}, [0.1, 1.0])
    assert [op for _, op, _ in runtime.updates] == ["increment", "increment", "set", "increment", "observe"]


def test_metric_argument_checks(runtime: FakeRuntime) -> None:
    counter_family = pb_utils.MetricFamily("c", "C", pb_utils.MetricFamily.COUNTER)
    counter = counter_family.Metric()
    with pytest.raises(
        pb_utils.TritonModelException,
        match=re.escape(
            "Failed to increment metric value: TRITONSERVER_METRIC_KIND_COUNTER can only be incremented "
            "monotonically by non-negative values."
        ),
    ):
        counter.increment(-1)
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Failed to set metric value: .*COUNTER does not support Set$"
    ):
        counter.set(1)
    with pytest.raises(pb_utils.TritonModelException, match=r"COUNTER does not support Observe"):
        counter.observe(1)
    gauge = pb_utils.MetricFamily("g", "G", pb_utils.MetricFamily.GAUGE).Metric()
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Failed to observe metric value: .*GAUGE does not"
    ):
        gauge.observe(1)
    histogram_family = pb_utils.MetricFamily("h", "H", pb_utils.MetricFamily.HISTOGRAM)
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Failed to create metric. Missing required buckets.$"
    ):
        histogram_family.Metric(labels={})
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Failed to create metric. Unexpected buckets found.$"
    ):
        counter_family.Metric(buckets=[1.0])
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Failed to create metric. Labels must be a dictionary.$"
    ):
        counter_family.Metric(labels=[("a", "b")])  # type: ignore[arg-type]
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Failed to create metric. Buckets must be a list.$"
    ):
        histogram_family.Metric(buckets=(1.0, 2.0))  # type: ignore[arg-type]
    with pytest.raises(pb_utils.TritonModelException, match=r"strictly sorted"):
        histogram_family.Metric(buckets=[2.0, 1.0])
    histogram = histogram_family.Metric(buckets=[1.0])
    with pytest.raises(pb_utils.TritonModelException, match=r"HISTOGRAM does not support Increment"):
        histogram.increment(1)
    with pytest.raises(
        pb_utils.TritonModelException,
        match=r"^Failed to get metric value: .*HISTOGRAM does not support Value$",
    ):
        histogram.value()
    with pytest.raises(TypeError):
        pb_utils.MetricFamily("k", "K", 0)  # type: ignore[arg-type]
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Error when creating MetricFamily: Invalid metric name$"
    ):
        pb_utils.MetricFamily("bad name", "B", pb_utils.MetricFamily.GAUGE)
    runtime.fail_with = "family 'c' already exists as a counter"
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Error when creating MetricFamily: family 'c' already"
    ):
        pb_utils.MetricFamily("c", "C", pb_utils.MetricFamily.GAUGE)
    with pytest.raises(pb_utils.TritonModelException, match=r"^Failed to increment metric value: family 'c'"):
        counter.increment(1)


def test_metrics_without_runtime() -> None:
    with pytest.raises(pb_utils.TritonModelException, match=r"no Triton runtime is installed"):
        pb_utils.MetricFamily("c", "C", pb_utils.MetricFamily.COUNTER)


# -- model control ----------------------------------------------------------------------------------------------


def test_model_control(runtime: FakeRuntime) -> None:
    pb_utils.load_model("m", config='{"backend": "python"}', files={"file:1/model.py": b"code"})
    pb_utils.load_model(model_name="n")
    pb_utils.unload_model("m", unload_dependents=True)
    assert pb_utils.is_model_ready("m", "2") is True
    assert pb_utils.is_model_ready("m") is True
    assert runtime.controls == [
        ("load", "m", {"config": '{"backend": "python"}', "files": {"file:1/model.py": b"code"}}),
        ("load", "n", {"config": "", "files": {}}),
        ("unload", "m", {"unload_dependents": True}),
        ("is_ready", "m", {"model_version": "2"}),
        ("is_ready", "m", {"model_version": ""}),
    ]
    with pytest.raises(pb_utils.TritonModelException, match=r"files should be a dictionary of file paths"):
        pb_utils.load_model("m", files=[("a", b"b")])  # type: ignore[arg-type]
    with pytest.raises(pb_utils.TritonModelException, match=r"version should be an integral value > 0"):
        pb_utils.is_model_ready("m", "latest")
    runtime.fail_with = "failed to load 'm'"
    with pytest.raises(pb_utils.TritonModelException, match=r"^Failed to load model: failed to load 'm'$"):
        pb_utils.load_model("m")
    with pytest.raises(pb_utils.TritonModelException, match=r"^Failed to unload model: "):
        pb_utils.unload_model("m")


def test_model_control_without_runtime() -> None:
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.is_model_ready("m")


@pytest.mark.parametrize(
    ("name", "timestamp"), [("", None), ("X" * 129, None), ("X_START", "soon"), ("X_END", True)]
)
def test_report_activity_refuses_what_the_server_could_not_record(name: str, timestamp: Any) -> None:
    """Checked in the model's process: a bad value never reaches the server's side of the socket."""
    trace = pb_utils.InferenceTrace(None, trace_id=7)
    with pytest.raises(pb_utils.TritonModelException, match=r"report_activity\(\)"):
        trace.report_activity(name, timestamp)
