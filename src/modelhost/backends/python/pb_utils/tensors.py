"""pb_utils.Tensor: a named tensor in host memory (a numpy array, never copied when C-contiguous) or in GPU memory
(held by the framework that owns it, backends/python/gpu_tensors.py), with Triton's DLPack exchange."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from modelhost.backends.python import gpu_tensors
from modelhost.backends.python.pb_utils.datatypes import TYPE_BYTES, tensor_dtype
from modelhost.backends.python.pb_utils.errors import TritonModelException


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
        self._dtype = tensor_dtype(array.dtype)
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
        tensor._dtype = tensor_dtype(array.dtype)
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
            tensor._dtype = tensor_dtype(gpu_tensors.dtype(device_tensor))
        except TypeError as e:  # BF16 and other types numpy does not name
            raise TritonModelException(f"Provided DLPack tensor is not supported: {e}") from e
        return tensor

    @classmethod
    def _to_gpu(cls, name: str, array: npt.NDArray[Any], device_id: int) -> Tensor:
        """A copy of a host array on CUDA device `device_id` (inputs given on the GPU, BLS outputs asked there)."""
        if array.dtype == np.object_:
            return cls(name, array)  # BYTES stay on the host, as in Triton
        return cls._on_gpu(name, gpu_call(gpu_tensors.to_device, array, device_id))

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
        if self._dtype == TYPE_BYTES:
            raise TritonModelException("DLPack does not have support for string tensors.")
        if self._array is None:
            return self._device.__dlpack__()
        array = self._array
        if not array.flags.writeable:
            # DLPack's original (unversioned) capsule cannot say "read-only", so numpy will not export one.
            array = array.copy()
        return array.__dlpack__()

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        if self._dtype == TYPE_BYTES:
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
        host: npt.NDArray[Any] = gpu_call(gpu_tensors.to_host, self._device)
        return host

    @staticmethod
    def from_dlpack(name: str, tensor: Any) -> Tensor:
        """A Tensor sharing the memory of a DLPack capsule or of an object with `__dlpack__` and
        `__dlpack_device__` (CPU or CUDA memory)."""
        if name == "":
            raise TritonModelException("Tensor name cannot be an empty string.")
        if type(tensor).__name__ == "PyCapsule":
            device = gpu_call(gpu_tensors.capsule_device, tensor)
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
            held = gpu_call(gpu_tensors.hold, tensor)
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


def gpu_call(fn: Callable[..., Any], *args: Any) -> Any:
    """A gpu_tensors call, its errors as the model sees errors of pb_utils."""
    try:
        return fn(*args)
    except gpu_tensors.GpuTensorError as e:
        raise TritonModelException(str(e)) from e
