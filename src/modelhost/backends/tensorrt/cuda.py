"""The few CUDA runtime calls the TensorRT backend needs, through NVIDIA's cuda-python bindings.

The binding itself, and why it is cuda-python, is `modelhost.host.cuda_runtime`; this module adds what
TensorRT needs on top (streams with priorities, device buffers that grow) and says, when the package is missing,
how to install it for this backend.

Imported only when an instance is created or a device is queried, never at module import, so that a missing
package says which one to install instead of failing the import of the backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy.typing as npt

from modelhost.errors import ModelConfigError
from modelhost.host import cuda_runtime
from modelhost.host.cuda_runtime import CudaError


def cudart() -> Any:
    """The cuda.bindings.runtime module; a load error naming the package to install when it is missing."""
    try:
        return cuda_runtime.runtime()
    except cuda_runtime.MissingBindings as e:
        raise ModelConfigError(
            "the tensorrt backend needs the Python package 'cuda-bindings' (NVIDIA's CUDA runtime bindings) "
            "for its device buffers, which is not installed; install it with: pip install 'modelhost[tensorrt]'"
        ) from e


def _call(result: Any) -> Any:
    """The value(s) of a cuda.bindings call, or CudaError with CUDA's name and description of the error."""
    return cuda_runtime.check(cudart(), result)


def device_count() -> int:
    rt = cudart()
    error, count = rt.cudaGetDeviceCount()
    if error == rt.cudaError_t.cudaErrorNoDevice:
        return 0
    _call((error,))
    return int(count)


def set_device(device_id: int) -> None:
    _call(cudart().cudaSetDevice(device_id))


def compute_capability(device_id: int) -> str:
    rt = cudart()
    major = _call(rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrComputeCapabilityMajor, device_id))
    minor = _call(rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrComputeCapabilityMinor, device_id))
    return f"{int(major)}.{int(minor)}"


def stream_priority(priority: str) -> int:
    """The CUDA priority of PRIORITY_MAX / PRIORITY_MIN / PRIORITY_DEFAULT on the current device (smaller
    numbers are higher priorities in CUDA)."""
    least, greatest = _call(cudart().cudaDeviceGetStreamPriorityRange())
    return {"MAX": int(greatest), "MIN": int(least)}.get(priority, 0)


class Stream:
    """A non-blocking CUDA stream on the current device."""

    def __init__(self, priority: int = 0) -> None:
        rt = cudart()
        self._stream: Any = _call(rt.cudaStreamCreateWithPriority(rt.cudaStreamNonBlocking, priority))

    @property
    def handle(self) -> int:
        """The cudaStream_t as TensorRT's Python API takes it."""
        return int(self._stream)

    def synchronize(self) -> None:
        _call(cudart().cudaStreamSynchronize(self._stream))

    def destroy(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            _call(cudart().cudaStreamDestroy(stream))


@dataclass(slots=True)
class DeviceBuffer:
    """Device memory that grows to the largest size asked of it (never shrinks: batches repeat)."""

    size: int = 0
    ptr: int = 0

    def ensure(self, nbytes: int) -> int:
        """The address of at least `nbytes` (at least 1: TensorRT wants an address even for empty tensors)."""
        nbytes = max(nbytes, 1)
        if nbytes > self.size:
            self.free()
            self.ptr = int(_call(cudart().cudaMalloc(nbytes)))
            self.size = nbytes
        return self.ptr

    def free(self) -> None:
        if self.ptr:
            ptr, self.ptr, self.size = self.ptr, 0, 0
            _call(cudart().cudaFree(ptr))


def copy_to_device(dst: int, host: npt.NDArray[Any], stream: Stream) -> None:
    """Queue a copy of a C-contiguous host array to device memory at `dst`; the array must live until the
    stream is synchronized."""
    if host.nbytes:
        rt = cudart()
        _call(
            rt.cudaMemcpyAsync(
                dst, host.ctypes.data, host.nbytes, rt.cudaMemcpyKind.cudaMemcpyHostToDevice, stream._stream
            )
        )


def copy_to_host(host: npt.NDArray[Any], src: int, stream: Stream) -> None:
    """Queue a copy of device memory at `src` into a C-contiguous host array."""
    if host.nbytes:
        rt = cudart()
        _call(
            rt.cudaMemcpyAsync(
                host.ctypes.data, src, host.nbytes, rt.cudaMemcpyKind.cudaMemcpyDeviceToHost, stream._stream
            )
        )


__all__ = [
    "CudaError",
    "DeviceBuffer",
    "Stream",
    "compute_capability",
    "copy_to_device",
    "copy_to_host",
    "cudart",
    "device_count",
    "set_device",
    "stream_priority",
]
