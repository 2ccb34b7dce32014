"""`triton_python_backend_utils` for modelhost's python backend: the API a Triton `model.py` imports as pb_utils.

The stub process puts this module in `sys.modules["triton_python_backend_utils"]` before importing the model, so
`import triton_python_backend_utils as pb_utils` gives the model Triton's names, signatures, defaults and error
messages. In Triton part of this API is Python (src/resources/triton_python_backend_utils.py) and part is C++
bound with pybind11 (src/pb_stub.cc); here it is all Python, and everything that needs the server goes through one
object the stub installs with `_set_runtime` (see `Runtime`). Without a runtime (a model file imported by a plain
test) BLS, response senders, metrics and model control raise TritonModelException, and Logger prints to stderr.

For the stub (not part of Triton's API):

- `Tensor(name, array)` never copies a C-contiguous array, so tensors built on views of shared memory stay views.
- `InferenceRequest._from_server(...)` builds the requests given to `execute`; `request._server_key()`,
  `request._release_flags()` and the sender's `_update_state` / `_close` / `_is_closed` are what the stub needs
  to apply Triton's rules to what `execute` returns.
- `InferenceResponse.output_tensors()`, `.error()` and `.parameters()` read a response back.
- `ResponseIterator(responses, cancel)` wraps the responses of a decoupled BLS request.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import json
import math
import os
import re
import struct
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from types import FrameType
from typing import Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from modelhost.backends.python import gpu_tensors

# -- constants --------------------------------------------------------------------------------------------------

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

TRITON_STRING_TO_NUMPY: dict[str, type[Any]] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# TRITONSERVER_DataType values, which Tensor.triton_dtype() returns and triton_to_numpy_type() takes.
_TRITON_TO_NUMPY: dict[int, type[Any]] = {
    1: np.bool_,
    2: np.uint8,
    3: np.uint16,
    4: np.uint32,
    5: np.uint64,
    6: np.int8,
    7: np.int16,
    8: np.int32,
    9: np.int64,
    10: np.float16,
    11: np.float32,
    12: np.float64,
    13: np.object_,
}
_TYPE_BYTES = 13


class MemoryType(enum.IntEnum):
    """PreferredMemory's memory types, with the values of Triton's `PreferredMemory::MemoryType` (not core's)."""

    TRITONSERVER_MEMORY_GPU = 0
    TRITONSERVER_MEMORY_CPU = 1


TRITONSERVER_MEMORY_GPU = MemoryType.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = MemoryType.TRITONSERVER_MEMORY_CPU
_MEMORY_DEFAULT = 2  # PreferredMemory::DEFAULT: not exposed by Triton, the BLS constructor's default


# -- errors -----------------------------------------------------------------------------------------------------


class TritonModelException(Exception):
    """Raised by this API where Triton raises; a model may raise it from initialize/execute/finalize."""

    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class _ErrorCode(enum.IntEnum):
    """TRITONSERVER_Error_Code: TritonError.code() returns one, TritonError.INTERNAL and the others are these."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7


class TritonError:
    """An error to put in an InferenceResponse: `TritonError(message, code=TritonError.INTERNAL)`."""

    UNKNOWN: ClassVar[_ErrorCode] = _ErrorCode.UNKNOWN
    INTERNAL: ClassVar[_ErrorCode] = _ErrorCode.INTERNAL
    NOT_FOUND: ClassVar[_ErrorCode] = _ErrorCode.NOT_FOUND
    INVALID_ARG: ClassVar[_ErrorCode] = _ErrorCode.INVALID_ARG
    UNAVAILABLE: ClassVar[_ErrorCode] = _ErrorCode.UNAVAILABLE
    UNSUPPORTED: ClassVar[_ErrorCode] = _ErrorCode.UNSUPPORTED
    ALREADY_EXISTS: ClassVar[_ErrorCode] = _ErrorCode.ALREADY_EXISTS
    CANCELLED: ClassVar[_ErrorCode] = _ErrorCode.CANCELLED

    def __init__(self, message: str, code: int = _ErrorCode.INTERNAL) -> None:
        if not isinstance(message, str):
            raise TypeError(f"TritonError(): message must be a str, not {type(message).__name__}")
        # Triton takes only the enum; plain ints are accepted too, because the stub rebuilds errors from the wire.
        if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code < len(_ErrorCode):
            raise TypeError(f"TritonError(): code must be one of TritonError's codes, not {code!r}")
        self._message = message
        self._code = _ErrorCode(code)

    def message(self) -> str:
        return self._message

    def code(self) -> _ErrorCode:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, TritonError.{self._code.name})"


# -- the runtime seam -------------------------------------------------------------------------------------------


class Runtime(Protocol):
    """What pb_utils needs from the stub process. Methods may be called from any thread of the model.

    Errors: a failed BLS request is returned as an InferenceResponse whose has_error() is True, never raised. The
    other methods raise TritonModelException with the server's message; pb_utils adds Triton's prefixes
    ("Failed to load model: ", "Error when creating MetricFamily: ", ...).
    """

    def exec_bls(
        self, request: InferenceRequest, decoupled: bool, timeout_us: int
    ) -> InferenceResponse | ResponseIterator:
        """Run a BLS request and block until it is answered; decoupled: an iterator of its responses
        (a ResponseIterator, or any iterator: pb_utils wraps it, taking its `cancel` method if it has one)."""
        ...

    def async_exec_bls(
        self, request: InferenceRequest, decoupled: bool
    ) -> Awaitable[InferenceResponse | AsyncIterator[InferenceResponse]]:
        """Send a BLS request now (called on the model's running event loop) and return what awaits its answer."""
        ...

    def send_response(self, key: int, response: InferenceResponse | None, flags: int) -> None:
        """A response (or just the FINAL flag) for the server request `key`; pb_utils has checked Triton's rules."""
        ...

    def is_cancelled(self, key: int) -> bool: ...

    def log(self, level: str, message: str, filename: str, line: int) -> None:
        """level: "INFO" | "WARNING" | "ERROR" | "VERBOSE"; filename and line are the model's call site."""
        ...

    def register_metric_family(self, name: str, description: str, kind: str) -> None:
        """kind: "COUNTER" | "GAUGE" | "HISTOGRAM"."""
        ...

    def register_metric(self, family: str, labels: dict[str, str], buckets: list[float] | None) -> int:
        """A metric of the family named `family`; returns the id for update_metric and metric_value."""
        ...

    def update_metric(self, metric_id: int, op: str, value: float) -> None:
        """op: "increment" | "set" | "observe" (pb_utils has checked that the family's kind allows it)."""
        ...

    def metric_value(self, metric_id: int) -> float: ...

    def trace_activity(self, trace_id: int, name: str, ns: int) -> None:
        """A custom activity at `ns` (time.monotonic_ns, the server's clock too) in the server's trace `trace_id`."""
        ...

    def model_control(self, op: str, model_name: str, **kwargs: Any) -> Any:
        """op "load" (config: str, files: dict[str, bytes]) -> None; "unload" (unload_dependents: bool) -> None;
        "is_ready" (model_version: str, "" for the latest) -> bool."""
        ...


_runtime: Runtime | None = None
_model_dir: str | None = None


def _set_runtime(runtime: Runtime | None) -> None:
    """Install (or, with None, remove) the stub's runtime."""
    global _runtime
    _runtime = runtime


def _set_model_dir(path: str | None) -> None:
    """The model's directory, for get_model_dir() (Triton defines that function once the stub is set up)."""
    global _model_dir
    _model_dir = path


def _require_runtime(what: str) -> Runtime:
    runtime = _runtime
    if runtime is None:
        raise TritonModelException(
            f"{what} is only available when the model runs in the python backend (no Triton runtime is installed)"
        )
    return runtime


def get_model_dir() -> str:
    """The directory of the running model's model.py."""
    if _model_dir is None:
        raise TritonModelException(
            "get_model_dir() is only available when the model runs in the python backend"
        )
    return _model_dir


# -- helpers of triton_python_backend_utils.py ------------------------------------------------------------------


def serialize_byte_tensor(input_tensor: npt.NDArray[Any]) -> bytes | tuple[()] | None:
    """A BYTES tensor (object or np.bytes_ array) as Triton's wire format: each element, in C order, preceded by
    its length as 4 bytes little-endian. As in Triton: () for an empty tensor, None for any other dtype."""
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        return None
    parts: list[bytes] = []
    for item in input_tensor.ravel(order="C"):
        # bytes go as they are; anything else (str, numbers) as its str() in UTF-8, as Triton does.
        data = bytes(item) if isinstance(item, bytes) else str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return b"".join(parts)


def deserialize_bytes_tensor(
    encoded_tensor: bytes | bytearray | memoryview | npt.NDArray[Any],
) -> npt.NDArray[Any]:
    """Triton's BYTES wire format back into a 1-D object array of bytes (struct.error when it is truncated)."""
    if isinstance(encoded_tensor, np.ndarray):
        buffer = np.ascontiguousarray(encoded_tensor).data.cast("B")
    else:
        buffer = memoryview(encoded_tensor).cast("B")
    items: list[bytes] = []
    offset = 0
    while offset < len(buffer):
        (length,) = struct.unpack_from("<I", buffer, offset)
        offset += 4
        (item,) = struct.unpack_from(f"<{length}s", buffer, offset)
        offset += length
        items.append(item)
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The request's input named `name`, or None (an optional input that was not sent)."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    for properties in model_config.get("input", ()):
        if properties["name"] == name:
            return properties  # type: ignore[no-any-return]
    return None


def get_output_config_by_name(model_config: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    for properties in model_config.get("output", ()):
        if properties["name"] == name:
            return properties  # type: ignore[no-any-return]
    return None


def using_decoupled_model_transaction_policy(model_config: Mapping[str, Any]) -> bool:
    policy = model_config.get("model_transaction_policy")
    if policy is None:
        return False
    return bool(policy.get("decoupled", False))


def triton_to_numpy_type(data_type: int) -> type[Any] | None:
    """A TRITONSERVER_DataType value (1 = BOOL ... 13 = BYTES) to its numpy type; None for any other."""
    return _TRITON_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type: Any) -> int | None:
    """A numpy dtype or type to its TRITONSERVER_DataType value; None when Triton has none."""
    for triton_type, numpy_type in _TRITON_TO_NUMPY.items():
        if triton_type != _TYPE_BYTES and data_type == numpy_type:
            return triton_type
    if data_type == np.object_ or data_type == np.bytes_:
        return _TYPE_BYTES
    return None


def triton_string_to_numpy(triton_type_string: str) -> type[Any]:
    """ "TYPE_FP32" -> np.float32 (KeyError for a name Triton does not know)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


_TRITON_TYPE_OF_DTYPE: dict[np.dtype[Any], int] = {}


def _tensor_dtype(dtype: np.dtype[Any]) -> int:
    """The Triton type of an array given to Tensor (the C++ numpy_to_triton_type of pb_stub_utils.cc)."""
    known = _TRITON_TYPE_OF_DTYPE.get(dtype)
    if known is not None:  # the common case, looked up once: every tensor of every request comes here
        return known
    if dtype == np.object_ or dtype.type == np.bytes_:
        return _TYPE_BYTES
    triton_type = numpy_to_triton_type(dtype)
    if triton_type is None:
        raise TritonModelException("NumPy dtype is not supported.")
    _TRITON_TYPE_OF_DTYPE[dtype] = triton_type
    return triton_type


# -- auto-complete ----------------------------------------------------------------------------------------------


class ModelConfig:
    """The configuration given to `auto_complete_config`, which may change max_batch_size, the scheduler,
    inputs, outputs and the transaction policy. Built from Triton's JSON (a str, as Triton does) or a dict."""

    def __init__(self, model_config: str | dict[str, Any]) -> None:
        self._model_config: dict[str, Any] = (
            json.loads(model_config) if isinstance(model_config, str) else model_config
        )

    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        configured = self._model_config.get("max_batch_size", 0)
        if configured > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {configured}, but in auto-complete-config function for "
                f"model '{self._name()}' specified max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{scheduler}', but auto-complete-config "
                    f"function for model '{self._name()}' tries to set scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        self._add_tensor("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict[str, Any]) -> None:
        self._add_tensor("output", output, ("name", "data_type", "dims"))

    def _add_tensor(self, kind: str, tensor: dict[str, Any], valid: tuple[str, ...]) -> None:
        model = self._name()
        for key in tensor:
            if key not in valid:
                allowed = ", ".join(f"'{v}'" for v in valid[:-1]) + f" and '{valid[-1]}'"
                raise ValueError(
                    f"{kind} '{tensor.get('name', '')}' in auto-complete-config function for model '{model}' "
                    f"contains property other than {allowed}."
                )
        if "name" not in tensor:
            raise ValueError(
                f"{kind} in auto-complete-config function for model '{model}' is missing 'name' property."
            )
        for required in ("data_type", "dims"):
            if required not in tensor:
                raise ValueError(
                    f"{kind} '{tensor['name']}' in auto-complete-config function for model '{model}' is missing "
                    f"'{required}' property."
                )
        existing_tensors: list[dict[str, Any]] = self._model_config.setdefault(kind, [])
        for existing in existing_tensors:
            if existing["name"] != tensor["name"]:
                continue
            # The same name again: it must agree with what the configuration says; it fills in what is unset.
            configured_type = existing.get("data_type", "TYPE_INVALID")
            if configured_type != "TYPE_INVALID" and configured_type != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{model}', configuration expects datatype {configured_type} for {kind} "
                    f"'{tensor['name']}', model provides {tensor['data_type']}"
                )
            if existing.get("dims") and existing["dims"] != tensor["dims"]:
                raise ValueError(
                    f"model '{model}', tensor '{tensor['name']}': the model expects dims {tensor['dims']} but the "
                    f"model configuration specifies dims {existing['dims']}"
                )
            if "optional" in existing and "optional" in tensor and existing["optional"] != tensor["optional"]:
                raise ValueError(
                    f"model '{model}', tensor '{tensor['name']}': the model expects optional {tensor['optional']} "
                    f"but the model configuration specifies optional {existing['optional']}"
                )
            existing["data_type"] = tensor["data_type"]
            existing["dims"] = tensor["dims"]
            if "optional" in tensor:
                existing["optional"] = tensor["optional"]
            return
        existing_tensors.append(tensor)

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        model = self._name()
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    f"model transaction property in auto-complete-config function for model '{model}' contains "
                    "property other than 'decoupled'."
                )
        policy: dict[str, Any] = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            if "decoupled" in policy and policy["decoupled"] != transaction_policy_dict["decoupled"]:
                raise ValueError(
                    f"trying to change decoupled property in auto-complete-config for model '{model}', which is "
                    f"already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = transaction_policy_dict["decoupled"]


# -- tensors ----------------------------------------------------------------------------------------------------


class _Capsule:
    """A bare DLPack capsule dressed for np.from_dlpack, which takes only objects with `__dlpack__`."""

    def __init__(self, capsule: object) -> None:
        self._capsule = capsule

    def __dlpack__(self, **kwargs: Any) -> object:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (gpu_tensors.KDL_CPU, 0)


class Tensor:
    """A named tensor: `Tensor(name, numpy_array)`, or `Tensor.from_dlpack(name, tensor)` for memory of another
    framework, on the CPU or a GPU. BYTES tensors are numpy object arrays of bytes.

    A C-contiguous array is kept as it is, not copied (the stub's tensors are views on shared memory); other
    arrays are made contiguous, as Triton does. A tensor in GPU memory is held by the torch tensor or CuPy array
    that owns that memory (backends/python/gpu_tensors.py).
    """

    def __init__(self, name: str, numpy_array: npt.ArrayLike) -> None:
        if not isinstance(name, str):
            raise TypeError(f"Tensor(): name must be a str, not {type(name).__name__}")
        if name == "":
            raise TritonModelException("Tensor name cannot be an empty string.")
        array = numpy_array if isinstance(numpy_array, np.ndarray) else np.asarray(numpy_array)
        self._dtype = _tensor_dtype(array.dtype)
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        self._name = name
        self._array: npt.NDArray[Any] | None = array
        self._device: Any = None  # a framework tensor in GPU memory; then _array is None
        self._device_id = 0

    @classmethod
    def _in_place(cls, name: str, array: npt.NDArray[Any]) -> Tensor:
        """A tensor the stub makes of a request's input (a named, contiguous array of a known type, over shared
        memory or a copy of its own): the constructor's checks, without their cost on every input of every
        request."""
        tensor = cls.__new__(cls)
        tensor._dtype = _tensor_dtype(array.dtype)
        tensor._name = name
        tensor._array = array
        tensor._device = None
        tensor._device_id = 0
        return tensor

    @classmethod
    def _on_gpu(cls, name: str, device_tensor: Any) -> Tensor:
        """A tensor over a framework's CUDA tensor (gpu_tensors.hold gives one)."""
        if name == "":
            raise TritonModelException("Tensor name cannot be an empty string.")
        tensor = cls.__new__(cls)
        tensor._name = name
        tensor._array = None
        tensor._device = device_tensor
        tensor._device_id = gpu_tensors.dlpack_device(device_tensor)[1]
        try:
            tensor._dtype = _tensor_dtype(gpu_tensors.dtype(device_tensor))
        except TypeError as e:  # BF16 and other types numpy does not name
            raise TritonModelException(f"Provided DLPack tensor is not supported: {e}") from e
        return tensor

    @classmethod
    def _to_gpu(cls, name: str, array: npt.NDArray[Any], device_id: int) -> Tensor:
        """A copy of a host array on CUDA device `device_id` (inputs given on the GPU, BLS outputs asked there)."""
        if array.dtype == np.object_:
            return cls(name, array)  # BYTES stay on the host, as in Triton
        return cls._on_gpu(name, _gpu(gpu_tensors.to_device, array, device_id))

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> npt.NDArray[Any]:
        if self._array is None:
            raise TritonModelException("Tensor is stored in GPU and cannot be converted to NumPy.")
        return self._array

    def triton_dtype(self) -> int:
        """The TRITONSERVER_DataType value (11 for FP32, 13 for BYTES), as Triton returns it."""
        return self._dtype

    def shape(self) -> list[int]:
        shape = self._array.shape if self._array is not None else self._device.shape
        return [int(d) for d in shape]

    def is_cpu(self) -> bool:
        return self._array is not None

    def to_dlpack(self) -> Any:
        """A DLPack capsule sharing this tensor's memory."""
        if self._dtype == _TYPE_BYTES:
            raise TritonModelException("DLPack does not have support for string tensors.")
        if self._array is None:
            return self._device.__dlpack__()
        array = self._array
        if not array.flags.writeable:
            # DLPack's original (unversioned) capsule cannot say "read-only", so numpy will not export one.
            array = array.copy()
        return array.__dlpack__()

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        if self._dtype == _TYPE_BYTES:
            raise TritonModelException("DLPack does not have support for string tensors.")
        if self._array is None:
            return self._device.__dlpack__(stream=stream, **kwargs)
        return self._array.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        if self._array is None:
            return (gpu_tensors.KDL_CUDA, self._device_id)
        return (gpu_tensors.KDL_CPU, 0)

    def _host_array(self) -> npt.NDArray[Any]:
        """The tensor's contents in host memory (a copy for a GPU tensor): what crosses to the server."""
        if self._array is not None:
            return self._array
        host: npt.NDArray[Any] = _gpu(gpu_tensors.to_host, self._device)
        return host

    @staticmethod
    def from_dlpack(name: str, tensor: Any) -> Tensor:
        """A Tensor sharing the memory of a DLPack capsule or of an object with `__dlpack__` and
        `__dlpack_device__` (CPU or CUDA memory)."""
        if name == "":
            raise TritonModelException("Tensor name cannot be an empty string.")
        if type(tensor).__name__ == "PyCapsule":
            device = _gpu(gpu_tensors.capsule_device, tensor)
            source: Any = _Capsule(tensor)
        elif hasattr(tensor, "__dlpack__") and hasattr(tensor, "__dlpack_device__"):
            device = gpu_tensors.dlpack_device(tensor)
            source = tensor
        else:
            raise TritonModelException(
                "Provided tensor is not supported. Tensor must be a DLPack capsule or have `__dlpack__` and "
                "`__dlpack_device__` attributes"
            )
        if device[0] == gpu_tensors.KDL_CUDA:
            held = _gpu(gpu_tensors.hold, tensor)
            if not gpu_tensors.is_contiguous(held):
                raise TritonModelException(_NOT_CONTIGUOUS)
            return Tensor._on_gpu(name, held)
        if device[0] not in gpu_tensors.CPU_DEVICES:
            raise TritonModelException(f"DLDevice type {device[0]} is not support by Python backend.")
        try:
            array = np.from_dlpack(source)
        except (BufferError, RuntimeError, TypeError, ValueError) as e:
            raise TritonModelException(f"Provided DLPack tensor is not supported: {e}") from e
        if not array.flags.c_contiguous:
            raise TritonModelException(_NOT_CONTIGUOUS)
        return Tensor(name, array)

    def __repr__(self) -> str:
        where = "" if self._array is not None else f", device=cuda:{self._device_id}"
        return f"Tensor({self._name!r}, shape={self.shape()}, triton_dtype={self._dtype}{where})"


_NOT_CONTIGUOUS = (
    "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored in C-Order are "
    "supported."
)


def _gpu(fn: Callable[..., Any], *args: Any) -> Any:
    """A gpu_tensors call, its errors as the model sees errors of pb_utils."""
    try:
        return fn(*args)
    except gpu_tensors.GpuTensorError as e:
        raise TritonModelException(str(e)) from e


# -- requests ---------------------------------------------------------------------------------------------------


class PreferredMemory:
    """Where a BLS request would like its outputs: PreferredMemory(TRITONSERVER_MEMORY_GPU, 0) gives them on
    cuda:0 (copied there in the stub), TRITONSERVER_MEMORY_CPU or the default in host memory."""

    def __init__(self, preferred_memory_type: MemoryType | int, preferred_device_id: int = 0) -> None:
        valid = (MemoryType.TRITONSERVER_MEMORY_GPU, MemoryType.TRITONSERVER_MEMORY_CPU, _MEMORY_DEFAULT)
        if (
            isinstance(preferred_memory_type, bool)
            or not isinstance(preferred_memory_type, int)
            or (preferred_memory_type not in valid)
        ):
            raise TypeError(
                "PreferredMemory(): preferred_memory_type must be TRITONSERVER_MEMORY_GPU or TRITONSERVER_MEMORY_CPU"
            )
        if isinstance(preferred_device_id, bool) or not isinstance(preferred_device_id, int):
            raise TypeError("PreferredMemory(): preferred_device_id must be an int")
        self.preferred_memory_type = int(preferred_memory_type)
        self.preferred_device_id = preferred_device_id


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
        if self._id and _runtime is not None:
            _runtime.trace_activity(
                self._id, name, time.monotonic_ns() if timestamp_ns is None else timestamp_ns
            )


def _parameters_json(parameters: Mapping[str, Any] | str | None) -> str:
    """Request/response parameters as Triton keeps them: a JSON object in a string."""
    if parameters is None:
        return "{}"
    if isinstance(parameters, str):
        # Not in Triton (it takes a dict); a JSON object is accepted as it is, e.g. parameters passed through.
        try:
            decoded = json.loads(parameters)
        except ValueError as e:
            raise TritonModelException(f"parameters must be a JSON object: {e}") from e
        if not isinstance(decoded, dict):
            raise TritonModelException(f"Expect dict, got {type(decoded)}")
        return parameters
    if not isinstance(parameters, Mapping):
        raise TritonModelException(f"Expect dict, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(f"Expect parameters keys to have type str, found type {type(key)}")
        if not isinstance(value, bool | int | str):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return json.dumps(dict(parameters))


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
_SERVER_PREFERRED_MEMORY = PreferredMemory(_MEMORY_DEFAULT, 0)
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
            preferred_memory=preferred_memory or PreferredMemory(_MEMORY_DEFAULT, 0),
            trace=trace or InferenceTrace(),
            parameters_json=_parameters_json(parameters),
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
        return _require_runtime("InferenceRequest.is_cancelled()").is_cancelled(self._key)

    def set_release_flags(self, flags: int) -> None:
        """TRITONSERVER_REQUEST_RELEASE_RESCHEDULE hands the request back to the (sequence) scheduler; the
        model then returns None for it."""
        self._release_flags_value = _check_int(flags, "flags", 0)

    # -- BLS

    def exec(self, decoupled: bool = False) -> InferenceResponse | ResponseIterator:
        """Run this request on another model and wait: an InferenceResponse (errors inside it, not raised), or
        with decoupled=True an iterator of the responses."""
        runtime = _require_runtime("BLS (InferenceRequest.exec)")
        result = runtime.exec_bls(self, bool(decoupled), self._timeout)
        if isinstance(result, InferenceResponse | ResponseIterator):
            return result
        return ResponseIterator(result, getattr(result, "cancel", None))

    def async_exec(
        self, decoupled: bool = False
    ) -> asyncio.Future[InferenceResponse | ResponseIterator | AsyncIterator[InferenceResponse]]:
        """`await request.async_exec()` in an `async def execute`: the request is sent at once, like Triton's."""
        runtime = _require_runtime("BLS (InferenceRequest.async_exec)")
        loop = asyncio.get_running_loop()  # as in Triton: RuntimeError outside a coroutine
        return asyncio.ensure_future(_bls_result(runtime.async_exec_bls(self, bool(decoupled))), loop=loop)

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


async def _bls_result(
    awaitable: Awaitable[InferenceResponse | AsyncIterator[InferenceResponse]],
) -> InferenceResponse | ResponseIterator | AsyncIterator[InferenceResponse]:
    result: Any = await awaitable
    if isinstance(result, InferenceResponse | ResponseIterator) or hasattr(result, "__anext__"):
        return result  # type: ignore[no-any-return]
    return ResponseIterator(result, getattr(result, "cancel", None))


# -- responses --------------------------------------------------------------------------------------------------


class InferenceResponse:
    """`InferenceResponse(output_tensors=[...], error=None, parameters={})`: a response, or an error response."""

    def __init__(
        self,
        output_tensors: Sequence[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: Mapping[str, bool | int | str] | str | None = None,
    ) -> None:
        if output_tensors is None:
            output_tensors = []
        # A list, as nearly every model passes, spares the (slow) abstract Sequence check.
        if type(output_tensors) is not list and (
            isinstance(output_tensors, str | bytes) or not isinstance(output_tensors, Sequence)
        ):
            raise TypeError(
                f"InferenceResponse(): output_tensors must be a list of pb_utils.Tensor, not "
                f"{type(output_tensors).__name__}"
            )
        for tensor in output_tensors:
            if not isinstance(tensor, Tensor):
                raise TypeError(
                    f"InferenceResponse(): output_tensors must be a list of pb_utils.Tensor, found "
                    f"{type(tensor).__name__}"
                )
        if error is not None and not isinstance(error, TritonError):
            raise TypeError(
                f"InferenceResponse(): error must be a pb_utils.TritonError, not {type(error).__name__}"
            )
        self._output_tensors = list(output_tensors)
        self._error = error
        self._parameters = _parameters_json(parameters)

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        """The parameters as a JSON object in a string."""
        return self._parameters

    def __repr__(self) -> str:
        if self._error is not None:
            return f"InferenceResponse(error={self._error!r})"
        return f"InferenceResponse(output_tensors={self._output_tensors!r})"


class ResponseIterator:
    """The responses of a decoupled BLS request, as they arrive. Once the last has arrived, iterating again
    starts over from the first (as Triton's does); cancel() asks the server to cancel the request."""

    def __init__(
        self, responses: Iterable[InferenceResponse], cancel: Callable[[], None] | None = None
    ) -> None:
        self._source: Iterator[InferenceResponse] = iter(responses)
        self._cancel = cancel
        self._seen: list[InferenceResponse] = []
        self._finished = False
        self._index = 0
        self._lock = threading.Lock()

    def __iter__(self) -> ResponseIterator:
        if self._finished and self._index >= len(self._seen):
            self._index = 0
        return self

    def __next__(self) -> InferenceResponse:
        with self._lock:
            if not self._finished:
                try:
                    response = next(self._source)
                except StopIteration:
                    self._finished = True
                    self._index = len(self._seen)
                    raise StopIteration from None
                self._seen.append(response)
                return response
            if self._index < len(self._seen):
                self._index += 1
                return self._seen[self._index - 1]
            raise StopIteration

    def cancel(self) -> None:
        if self._cancel is not None:
            self._cancel()


class InferenceResponseSender:
    """`request.get_response_sender()`: how a decoupled model (or a default one, once) sends responses."""

    def __init__(self, key: int | None, decoupled: bool | None) -> None:
        self._key = key
        self._decoupled = decoupled
        self._closed = False
        self._sent = 0
        self._lock = threading.Lock()

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if response is not None and not isinstance(response, InferenceResponse):
            raise TypeError(
                f"send(): response must be a pb_utils.InferenceResponse or None, not {type(response).__name__}"
            )
        if isinstance(flags, bool) or not isinstance(flags, int):
            raise TypeError(f"send(): flags must be an int, not {type(flags).__name__}")
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        runtime = _require_runtime("InferenceResponseSender.send()") if self._key is not None else None
        self._update_state(response, flags)
        assert runtime is not None and self._key is not None  # _update_state refuses senders without a key
        runtime.send_response(self._key, response, flags)

    def is_cancelled(self) -> bool:
        if self._key is None:
            return False
        return _require_runtime("InferenceResponseSender.is_cancelled()").is_cancelled(self._key)

    # -- for the stub

    def _update_state(self, response: InferenceResponse | None, flags: int) -> None:
        """Triton's ResponseSender::UpdateStateAndCounters: check a response may go out and count it. The stub
        calls it (flags FINAL) for each response `execute` returns, so a default-mode model cannot both send
        through the sender and return a response."""
        if self._decoupled is None:
            raise TritonModelException(
                "Unable to send response. Response sender has no reference to the decoupled state of the model."
            )
        with self._lock:
            if not self._decoupled:
                if response is not None and self._sent > 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than one response."
                    )
                if response is None and flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL and self._sent == 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete final before sending "
                        "a response."
                    )
            if self._closed:
                raise TritonModelException("Unable to send response. Response sender has been closed.")
            if flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                self._closed = True
            self._sent += 1

    def _close(self) -> None:
        """No more responses (Triton closes every sender of a batch whose execute raised)."""
        with self._lock:
            self._closed = True

    def _is_closed(self) -> bool:
        return self._closed

    def _responses_sent(self) -> int:
        return self._sent


# -- logging ----------------------------------------------------------------------------------------------------


class _LogLevel(enum.IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


_LEADING_CHAR = {_LogLevel.INFO: "I", _LogLevel.WARNING: "W", _LogLevel.ERROR: "E", _LogLevel.VERBOSE: "I"}


def _caller() -> tuple[str, int]:
    """The model's file and line that called the Logger: the first frame outside this module."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_globals is globals():
        frame = frame.f_back
    if frame is None:
        return ("<unknown>", 0)
    return (frame.f_code.co_filename, frame.f_lineno or 0)


class Logger:
    """Log to the server's log: `pb_utils.Logger.log_info("...")`, or `Logger.log(message, Logger.WARNING)`."""

    LogLevel: ClassVar[type[_LogLevel]] = _LogLevel
    INFO: ClassVar[_LogLevel] = _LogLevel.INFO
    WARNING: ClassVar[_LogLevel] = _LogLevel.WARNING
    ERROR: ClassVar[_LogLevel] = _LogLevel.ERROR
    VERBOSE: ClassVar[_LogLevel] = _LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: _LogLevel = _LogLevel.INFO) -> None:
        if not isinstance(message, str):
            raise TypeError(f"log(): message must be a str, not {type(message).__name__}")
        if not isinstance(level, _LogLevel):
            raise TypeError(f"log(): level must be a pb_utils.Logger.LogLevel, not {level!r}")
        filename, line = _caller()
        runtime = _runtime
        if runtime is not None:
            runtime.log(level.name, message, filename, line)
            return
        # No server to log to: Triton's own line format on stderr, as its stub does before logging is up.
        now = time.time()
        stamp = time.strftime("%m%d %H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1_000_000):06d}"
        print(
            f"{_LEADING_CHAR[level]}{stamp} {os.getpid()} {os.path.basename(filename)}:{line}]  {message}",
            file=sys.stderr,
            flush=True,
        )

    @staticmethod
    def log_info(message: str) -> None:
        Logger.log(message, _LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        Logger.log(message, _LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        Logger.log(message, _LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        Logger.log(message, _LogLevel.VERBOSE)


# -- custom metrics ---------------------------------------------------------------------------------------------


class MetricKind(enum.IntEnum):
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


COUNTER = MetricKind.COUNTER
GAUGE = MetricKind.GAUGE
HISTOGRAM = MetricKind.HISTOGRAM

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_CORE_KIND = {kind: f"TRITONSERVER_METRIC_KIND_{kind.name}" for kind in MetricKind}


def _metric_value(value: object, method: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{method}(): value must be a number, not {type(value).__name__}")
    return float(value)


class Metric:
    """One metric (one set of label values) of a MetricFamily; made by `family.Metric(labels, buckets)`."""

    def __init__(self, family: MetricFamily, metric_id: int) -> None:
        self._family = family
        self._id = metric_id

    def _update(self, op: str, value: float, failure: str) -> None:
        try:
            _require_runtime("Metric").update_metric(self._id, op, value)
        except TritonModelException as e:
            raise TritonModelException(f"{failure}: {e}") from e

    def increment(self, value: float) -> None:
        amount = _metric_value(value, "increment")
        kind = self._family._kind
        failure = "Failed to increment metric value"
        if kind == MetricKind.COUNTER and amount < 0.0:
            raise TritonModelException(
                f"{failure}: TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by "
                "non-negative values."
            )
        if kind == MetricKind.HISTOGRAM:
            raise TritonModelException(
                f"{failure}: TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Increment"
            )
        self._update("increment", amount, failure)

    def set(self, value: float) -> None:
        amount = _metric_value(value, "set")
        kind = self._family._kind
        failure = "Failed to set metric value"
        if kind != MetricKind.GAUGE:
            raise TritonModelException(f"{failure}: {_CORE_KIND[kind]} does not support Set")
        self._update("set", amount, failure)

    def observe(self, value: float) -> None:
        amount = _metric_value(value, "observe")
        kind = self._family._kind
        failure = "Failed to observe metric value"
        if kind != MetricKind.HISTOGRAM:
            raise TritonModelException(f"{failure}: {_CORE_KIND[kind]} does not support Observe")
        self._update("observe", amount, failure)

    def value(self) -> float:
        failure = "Failed to get metric value"
        if self._family._kind == MetricKind.HISTOGRAM:
            raise TritonModelException(
                f"{failure}: TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value"
            )
        try:
            return float(_require_runtime("Metric").metric_value(self._id))
        except TritonModelException as e:
            raise TritonModelException(f"{failure}: {e}") from e


_MetricClass = Metric  # MetricFamily's method `Metric` hides the class name inside that class


class MetricFamily:
    """A custom metric family on the metrics endpoint: `MetricFamily(name, description, MetricFamily.COUNTER)`."""

    COUNTER: ClassVar[MetricKind] = MetricKind.COUNTER
    GAUGE: ClassVar[MetricKind] = MetricKind.GAUGE
    HISTOGRAM: ClassVar[MetricKind] = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        if not isinstance(name, str) or not isinstance(description, str):
            raise TypeError("MetricFamily(): name and description must be str")
        if not isinstance(kind, MetricKind):
            raise TypeError(
                f"MetricFamily(): kind must be MetricFamily.COUNTER, GAUGE or HISTOGRAM, not {kind!r}"
            )
        failure = "Error when creating MetricFamily"
        if not _METRIC_NAME.match(name):
            raise TritonModelException(f"{failure}: Invalid metric name")
        try:
            _require_runtime("MetricFamily").register_metric_family(name, description, kind.name)
        except TritonModelException as e:
            raise TritonModelException(f"{failure}: {e}") from e
        self._name = name
        self._description = description
        self._kind = kind

    def Metric(  # Triton's name for the method
        self, labels: dict[str, str] | None = None, buckets: list[float] | None = None
    ) -> _MetricClass:
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if self._kind != MetricKind.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
        elif self._kind == MetricKind.HISTOGRAM:
            raise TritonModelException("Failed to create metric. Missing required buckets.")
        failure = "Error when creating Metric"
        label_map = dict(labels or {})
        for key, value in label_map.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TritonModelException(f"{failure}: label names and values must be strings")
        bucket_list: list[float] | None = None
        if buckets is not None:
            bucket_list = [_metric_value(b, "Metric") for b in buckets]
            if any(math.isnan(b) for b in bucket_list) or any(
                a >= b for a, b in itertools.pairwise(bucket_list)
            ):
                raise TritonModelException(f"{failure}: Bucket Boundaries must be strictly sorted")
        try:
            metric_id = _require_runtime("Metric").register_metric(self._name, label_map, bucket_list)
        except TritonModelException as e:
            raise TritonModelException(f"{failure}: {e}") from e
        return _MetricClass(self, metric_id)


# -- model control (explicit model control mode) ----------------------------------------------------------------


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load (or reload) a model, optionally with a config JSON and override files (path -> content)."""
    if not isinstance(model_name, str) or not isinstance(config, str):
        raise TypeError("load_model(): model_name and config must be str")
    files_map: dict[str, bytes] = {}
    if files is not None:
        if not isinstance(files, dict):
            raise TritonModelException(
                f"failed to load model '{model_name}', files should be a dictionary of file paths and file contents"
            )
        for path, content in files.items():
            if not isinstance(path, str) or not isinstance(content, bytes):
                raise TypeError("load_model(): files must map str paths to bytes contents")
            files_map[path] = content
    runtime = _require_runtime("load_model()")
    try:
        runtime.model_control("load", model_name, config=config, files=files_map)
    except TritonModelException as e:
        raise TritonModelException(f"Failed to load model: {e}") from e


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    if not isinstance(model_name, str):
        raise TypeError("unload_model(): model_name must be a str")
    runtime = _require_runtime("unload_model()")
    try:
        runtime.model_control("unload", model_name, unload_dependents=bool(unload_dependents))
    except TritonModelException as e:
        raise TritonModelException(f"Failed to unload model: {e}") from e


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether the model (the given version, or its latest with "") is ready."""
    if not isinstance(model_name, str) or not isinstance(model_version, str):
        raise TypeError("is_model_ready(): model_name and model_version must be str")
    failure = "Failed to check model readiness"
    if model_version:
        # Triton parses the version with std::stol: leading digits, an optional sign, then anything.
        match = re.match(r"\s*([+-]?\d+)", model_version)
        if match is None:
            raise TritonModelException(
                f"{failure}: failed to get model version from specified version string '{model_version}' "
                "(details: stol), version should be an integral value > 0"
            )
        if int(match.group(1)) < 0:
            raise TritonModelException(
                f"{failure}: failed to get model version from specified version string '{model_version}', "
                "version should be an integral value > 0"
            )
        model_version = match.group(1).lstrip("+")
    runtime = _require_runtime("is_model_ready()")
    try:
        return bool(runtime.model_control("is_ready", model_name, model_version=model_version))
    except TritonModelException as e:
        raise TritonModelException(f"{failure}: {e}") from e
