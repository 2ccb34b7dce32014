"""Tensors in GPU memory inside a python model's stub process: DLPack on CUDA, held by torch or CuPy.

`pb_utils.Tensor` keeps a CUDA tensor as the framework object that holds its memory (a torch tensor or a CuPy
array; a bare DLPack capsule, or another DLPack producer such as a JAX array, is taken in by torch, else by CuPy).
The stub itself has no CUDA code: a model that hands it device memory has one of them loaded already.

How tensors cross between the stub and the server: through host memory, as every other tensor (the stub's
shared-memory arena). A GPU output is copied to the host when it leaves the stub; inputs are given on a GPU, where
a model asks for that (`FORCE_CPU_ONLY_INPUT_TENSORS: "no"` on a KIND_GPU instance, or a BLS request's
`preferred_memory`), by one copy to the device in the stub. Triton's python backend shares device memory with the
stub through CUDA IPC instead. Here the server's backends, batching and frontends all work on host arrays, so a
tensor that went through IPC would still be copied to the host once on the server's side; and the IPC handle of
an allocation must be opened once per process (a system call and a mapping, hundreds of microseconds), which
costs more than the copy of a tensor of the sizes requests carry. `benchmarks/gpu_tensor_transfer.py` measures
both (run by scripts/gpu_check.sh).

This module is imported by the stub process: numpy and the standard library, torch or CuPy only when used.
"""

from __future__ import annotations

import ctypes
import importlib
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

# DLDeviceType values (dlpack.h).
KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3  # pinned host memory, readable from the CPU
CPU_DEVICES = (KDL_CPU, KDL_CUDA_HOST)


class GpuTensorError(Exception):
    """A GPU tensor that cannot be held or moved; pb_utils turns it into TritonModelException."""


class Framework(Protocol):
    """What holds CUDA tensors in the stub."""

    name: str

    def holds(self, obj: Any) -> bool:
        """Whether `obj` is this framework's own tensor."""

    def from_dlpack(self, obj: Any) -> Any:
        """A tensor of this framework sharing the memory of a DLPack capsule or producer."""

    def to_host(self, tensor: Any) -> npt.NDArray[Any]:
        """A new host array with the tensor's contents."""

    def to_device(self, array: npt.NDArray[Any], device_id: int) -> Any:
        """A new tensor on CUDA device `device_id` with the array's contents."""

    def dtype(self, tensor: Any) -> np.dtype[Any]:
        """The numpy dtype of the tensor's elements."""


class _Torch:
    name = "torch"

    def __init__(self, torch: Any) -> None:
        self._torch = torch

    def holds(self, obj: Any) -> bool:
        return isinstance(obj, self._torch.Tensor)

    def from_dlpack(self, obj: Any) -> Any:
        return self._torch.utils.dlpack.from_dlpack(obj)

    def to_host(self, tensor: Any) -> npt.NDArray[Any]:
        return np.asarray(tensor.detach().cpu().numpy())

    def to_device(self, array: npt.NDArray[Any], device_id: int) -> Any:
        # torch.tensor copies, so a read-only view of shared memory is fine (from_numpy would warn about it).
        return self._torch.tensor(array, device=f"cuda:{device_id}")

    def dtype(self, tensor: Any) -> np.dtype[Any]:
        found: np.dtype[Any] = self._torch.empty((), dtype=tensor.dtype).numpy().dtype
        return found


class _CuPy:
    name = "cupy"

    def __init__(self, cupy: Any) -> None:
        self._cupy = cupy

    def holds(self, obj: Any) -> bool:
        return isinstance(obj, self._cupy.ndarray)

    def from_dlpack(self, obj: Any) -> Any:
        return self._cupy.from_dlpack(obj)

    def to_host(self, tensor: Any) -> npt.NDArray[Any]:
        return np.asarray(self._cupy.asnumpy(tensor))

    def to_device(self, array: npt.NDArray[Any], device_id: int) -> Any:
        with self._cupy.cuda.Device(device_id):
            return self._cupy.asarray(array)

    def dtype(self, tensor: Any) -> np.dtype[Any]:
        found: np.dtype[Any] = np.dtype(tensor.dtype)
        return found


_framework: Framework | None = None


def framework() -> Framework:
    """torch if the stub's Python has it, else CuPy; GpuTensorError naming both when it has neither."""
    global _framework
    if _framework is None:
        for module, wrap in (("torch", _Torch), ("cupy", _CuPy)):
            try:
                _framework = wrap(importlib.import_module(module))
                break
            except ImportError:
                continue
        else:
            raise GpuTensorError(
                "GPU tensors in a python model need torch or cupy in the Python that runs the model, and it has "
                "neither"
            )
    return _framework


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype = ctypes.c_int
_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def capsule_device(capsule: object) -> tuple[int, int]:
    """The (DLDeviceType, device id) of an unused DLPack capsule, read from its DLTensor without consuming it
    (a capsule can be consumed once)."""
    if not _is_valid(capsule, b"dltensor"):
        raise GpuTensorError("Provided DLPack capsule was already used, or is not a DLPack tensor")
    pointer = _get_pointer(capsule, b"dltensor")
    # DLManagedTensor starts with its DLTensor: void* data, then DLDevice {int32 device_type, int32 device_id}.
    device = (ctypes.c_int32 * 2).from_address(pointer + ctypes.sizeof(ctypes.c_void_p))
    return int(device[0]), int(device[1])


def dlpack_device(obj: Any) -> tuple[int, int]:
    """Where a DLPack producer's memory is."""
    device = obj.__dlpack_device__()
    return int(device[0]), int(device[1])


def hold(obj: Any) -> Any:
    """The framework tensor that keeps a CUDA tensor (a capsule or a DLPack producer) for a pb_utils.Tensor."""
    chosen = framework()
    if chosen.holds(obj):
        return obj
    try:
        return chosen.from_dlpack(obj)
    except Exception as e:  # each framework raises its own types for a tensor it cannot take
        raise GpuTensorError(f"Provided DLPack tensor is not supported by {chosen.name}: {e}") from e


def is_contiguous(tensor: Any) -> bool:
    """Whether a held tensor is C-contiguous (torch: is_contiguous(); CuPy: its flags)."""
    if hasattr(tensor, "is_contiguous"):
        return bool(tensor.is_contiguous())
    flags = getattr(tensor, "flags", None)
    return bool(flags.c_contiguous) if flags is not None else True


def to_host(tensor: Any) -> npt.NDArray[Any]:
    return framework().to_host(tensor)


def to_device(array: npt.NDArray[Any], device_id: int) -> Any:
    return framework().to_device(array, device_id)


def dtype(tensor: Any) -> np.dtype[Any]:
    return framework().dtype(tensor)


__all__ = [
    "CPU_DEVICES",
    "KDL_CPU",
    "KDL_CUDA",
    "KDL_CUDA_HOST",
    "Framework",
    "GpuTensorError",
    "capsule_device",
    "dlpack_device",
    "dtype",
    "framework",
    "hold",
    "is_contiguous",
    "to_device",
    "to_host",
]
