"""pb_utils.InferenceRequest: given to `execute` by the server (`_from_server`), or built by the model for BLS (the
constructor, with Triton's checks), and its trace."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence

from modelhost.backends.python.pb_utils.bls import (
    MEMORY_DEFAULT,
    PreferredMemory,
    ResponseIterator,
    bls_result,
)
from modelhost.backends.python.pb_utils.errors import TritonModelException
from modelhost.backends.python.pb_utils.responses import InferenceResponse, parameters_json
from modelhost.backends.python.pb_utils.runtime import installed_runtime, require_runtime
from modelhost.backends.python.pb_utils.senders import InferenceResponseSender
from modelhost.backends.python.pb_utils.tensors import Tensor

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2

TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


class InferenceTrace:
    """A request's trace; get_context() is the OpenTelemetry context as a JSON string, or None. Handed to a BLS
    request (`InferenceRequest(..., trace=request.trace())`), it makes that request's trace a child of this one."""

    def __init__(self, context: str | None = None, trace_id: int = 0) -> None:
        self._context = context
        self._id = trace_id  # the server's id of the request's trace; 0: not traced

    def get_context(self) -> str | None:
        return self._context or None

    def report_activity(self, name: str, timestamp_ns: int | None = None) -> None:
        """Record a custom activity in the request's trace, now or at `timestamp_ns` (`time.monotonic_ns()`), as a
        C backend does with TRITONSERVER_InferenceTraceReportActivity (modelhost's; Triton's python backend has no
        such call). In OpenTelemetry mode `<X>_START` and `<X>_END` make a span `<X>`. A request that is not
        traced ignores it."""
        if not isinstance(name, str) or not name or len(name) > 128:
            raise TritonModelException("report_activity(): name must be a string of 1 to 128 characters")
        if timestamp_ns is not None and (isinstance(timestamp_ns, bool) or not isinstance(timestamp_ns, int)):
            raise TritonModelException("report_activity(): timestamp_ns must be an int (time.monotonic_ns())")
        runtime = installed_runtime()
        if self._id and runtime is not None:
            runtime.trace_activity(self._id, name, time.monotonic_ns() if timestamp_ns is None else timestamp_ns)


def _check_int(value: object, what: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        bound = "" if minimum is None else f" >= {minimum}"
        raise TypeError(f"InferenceRequest(): {what} must be an int{bound}, not {value!r}")
    return value


def _utf8(value: bytes, argument: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise TypeError(f"InferenceRequest(): {argument} given as bytes must be UTF-8") from None


# Shared by every request the server sends (one per request cost a few microseconds each, per request): where a
# server request "prefers" its outputs is never asked, and an untraced trace holds nothing that changes.
_SERVER_PREFERRED_MEMORY = PreferredMemory(MEMORY_DEFAULT, 0)
_UNTRACED = InferenceTrace()


class InferenceRequest:
    """A request: given to `execute` by the server, or built by the model for BLS with
    `InferenceRequest(model_name=..., requested_output_names=[...], inputs=[...], ...)`.

    The parameters are in Triton's order (request_id, correlation_id, inputs, requested_output_names, model_name,
    model_version, flags, timeout, preferred_memory, trace, parameters); inputs, requested_output_names and
    model_name are required. timeout is in microseconds.
    """

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: Sequence[Tensor] | None = None,
        requested_output_names: Sequence[str] | None = None,
        model_name: str | None = None,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: InferenceTrace | None = None,
        parameters: Mapping[str, bool | int | str] | str | None = None,
    ) -> None:
        for argument, value in (
            ("inputs", inputs),
            ("requested_output_names", requested_output_names),
            ("model_name", model_name),
        ):
            if value is None:
                raise TypeError(f"InferenceRequest() missing required argument: '{argument}'")
        assert inputs is not None and requested_output_names is not None and model_name is not None
        # bytes are taken as UTF-8 text, as pybind11 converts them to std::string in Triton's stub (a model that
        # reads a model name from a BYTES input passes `tensor.as_numpy()[0]`, bytes, as Triton's bls_simple).
        if isinstance(request_id, bytes):
            request_id = _utf8(request_id, "request_id")
        if isinstance(model_name, bytes):
            model_name = _utf8(model_name, "model_name")
        if not isinstance(request_id, str):
            raise TypeError(f"InferenceRequest(): request_id must be a str, not {type(request_id).__name__}")
        if not isinstance(model_name, str):
            raise TypeError(f"InferenceRequest(): model_name must be a str, not {type(model_name).__name__}")
        if isinstance(correlation_id, bool) or not isinstance(correlation_id, int | str):
            raise TritonModelException("Correlation ID must be integer or string")
        if isinstance(correlation_id, int) and correlation_id < 0:
            raise TypeError("InferenceRequest(): correlation_id must be an unsigned 64-bit integer or a str")
        if isinstance(inputs, str | bytes) or not isinstance(inputs, Sequence):
            raise TypeError("InferenceRequest(): inputs must be a list of pb_utils.Tensor")
        for tensor in inputs:
            if tensor is None:
                raise TritonModelException(
                    f"Input tensor for request with id '{request_id}' and model name '{model_name}' should not "
                    "be empty."
                )
            if not isinstance(tensor, Tensor):
                raise TypeError(
                    f"InferenceRequest(): inputs must be a list of pb_utils.Tensor, found {type(tensor).__name__}"
                )
        if isinstance(requested_output_names, str | bytes) or not isinstance(
            requested_output_names, Sequence
        ):
            raise TypeError("InferenceRequest(): requested_output_names must be a list of str")
        for output_name in requested_output_names:
            if not isinstance(output_name, str):
                raise TypeError("InferenceRequest(): requested_output_names must be a list of str")
            if output_name == "":
                raise TritonModelException(
                    f"Requested output name for request with id '{request_id}' and model name '{model_name}' "
                    "should not be empty."
                )
        if preferred_memory is not None and not isinstance(preferred_memory, PreferredMemory):
            raise TypeError("InferenceRequest(): preferred_memory must be a pb_utils.PreferredMemory")
        if trace is not None and not isinstance(trace, InferenceTrace):
            raise TypeError("InferenceRequest(): trace must be an InferenceTrace")
        self._init(
            key=None,
            request_id=request_id,
            correlation_id=correlation_id,
            inputs=list(inputs),
            requested_output_names=list(requested_output_names),
            model_name=model_name,
            model_version=_check_int(model_version, "model_version"),
            flags=_check_int(flags, "flags", 0),
            timeout=_check_int(timeout, "timeout", 0),
            preferred_memory=preferred_memory or PreferredMemory(MEMORY_DEFAULT, 0),
            trace=trace or InferenceTrace(),
            parameters_json=parameters_json(parameters),
            decoupled=None,
        )

    def _init(
        self,
        *,
        key: int | None,
        request_id: str,
        correlation_id: int | str,
        inputs: list[Tensor],
        requested_output_names: list[str],
        model_name: str,
        model_version: int,
        flags: int,
        timeout: int,
        preferred_memory: PreferredMemory,
        trace: InferenceTrace,
        parameters_json: str,
        decoupled: bool | None,
    ) -> None:
        self._key = key
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._inputs = inputs
        # Triton keeps the names in a std::set: duplicates collapse (the order of first mention is kept here).
        self._requested_output_names = list(dict.fromkeys(requested_output_names))
        self._model_name = model_name
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        self._preferred_memory_value = preferred_memory
        self._trace = trace
        self._parameters = parameters_json
        self._release_flags_value = TRITONSERVER_REQUEST_RELEASE_ALL
        # Every request has one sender (Triton's too); a BLS request's refuses to send (decoupled unknown).
        self._sender = InferenceResponseSender(key, decoupled)

    @classmethod
    def _from_server(
        cls,
        key: int,
        model_name: str,
        model_version: int,
        inputs: list[Tensor],
        requested_output_names: list[str],
        request_id: str,
        correlation_id: int | str,
        flags: int,
        timeout: int,
        parameters_json: str,
        decoupled: bool,
        trace_context: str | None = None,
        trace_id: int = 0,
    ) -> InferenceRequest:
        """A request from the server for `execute` (for the stub). `key` names it to the runtime; the values
        are taken as they are, without the BLS constructor's checks."""
        request = cls.__new__(cls)
        request._init(
            key=key,
            request_id=request_id,
            correlation_id=correlation_id,
            inputs=inputs,
            requested_output_names=requested_output_names,
            model_name=model_name,
            model_version=model_version,
            flags=flags,
            timeout=timeout,
            preferred_memory=_SERVER_PREFERRED_MEMORY,
            trace=_UNTRACED
            if trace_context is None and not trace_id
            else InferenceTrace(trace_context, trace_id),
            parameters_json=parameters_json or "{}",
            decoupled=decoupled,
        )
        return request

    # -- Triton's accessors

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def requested_output_names(self) -> list[str]:
        return list(self._requested_output_names)

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = _check_int(flags, "flags", 0)

    def timeout(self) -> int:
        """The timeout in microseconds (0: none)."""
        return self._timeout

    def parameters(self) -> str:
        """The parameters as a JSON object in a string."""
        return self._parameters

    def trace(self) -> InferenceTrace:
        return self._trace

    def model_name(self) -> str:
        return self._model_name

    def model_version(self) -> int:
        return self._model_version

    def get_response_sender(self) -> InferenceResponseSender:
        return self._sender

    def is_cancelled(self) -> bool:
        if self._key is None:
            return False  # a BLS request the model built is not the server's to cancel
        return require_runtime("InferenceRequest.is_cancelled()").is_cancelled(self._key)

    def set_release_flags(self, flags: int) -> None:
        """TRITONSERVER_REQUEST_RELEASE_RESCHEDULE hands the request back to the (sequence) scheduler; the
        model then returns None for it."""
        self._release_flags_value = _check_int(flags, "flags", 0)

    # -- BLS

    def exec(self, decoupled: bool = False) -> InferenceResponse | ResponseIterator:
        """Run this request on another model and wait: an InferenceResponse (errors inside it, not raised), or
        with decoupled=True an iterator of the responses."""
        runtime = require_runtime("BLS (InferenceRequest.exec)")
        result = runtime.exec_bls(self, bool(decoupled), self._timeout)
        if isinstance(result, InferenceResponse | ResponseIterator):
            return result
        return ResponseIterator(result, getattr(result, "cancel", None))

    def async_exec(
        self, decoupled: bool = False
    ) -> asyncio.Future[InferenceResponse | ResponseIterator | AsyncIterator[InferenceResponse]]:
        """`await request.async_exec()` in an `async def execute`: the request is sent at once, like Triton's."""
        runtime = require_runtime("BLS (InferenceRequest.async_exec)")
        loop = asyncio.get_running_loop()  # as in Triton: RuntimeError outside a coroutine
        return asyncio.ensure_future(bls_result(runtime.async_exec_bls(self, bool(decoupled))), loop=loop)

    # -- for the stub

    def _server_key(self) -> int | None:
        """The runtime's key of a request from the server; None for a BLS request."""
        return self._key

    def _release_flags(self) -> int:
        return self._release_flags_value

    def _preferred_memory(self) -> PreferredMemory:
        return self._preferred_memory_value

    def __repr__(self) -> str:
        return (
            f"InferenceRequest(model_name={self._model_name!r}, request_id={self._request_id!r}, "
            f"inputs={[t.name() for t in self._inputs]}, requested_output_names={self._requested_output_names})"
        )


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The request's input named `name`, or None (an optional input that was not sent)."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None
