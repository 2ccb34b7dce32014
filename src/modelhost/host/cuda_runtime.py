"""The CUDA runtime calls modelhost makes itself, through NVIDIA's cuda-python bindings (`cuda-bindings`).

Why cuda-python (`cuda.bindings.runtime`): it is NVIDIA's own thin binding of the CUDA runtime API, a few MB with
the runtime linked in statically, so it needs nothing but the driver; it is also what tritonclient's
`cuda_shared_memory` utilities use on the client side. PyTorch or CuPy would bring far more for a handful of
calls. Every call returns `(error, *values)`; `check` turns an error into CudaError.

Imported lazily (`runtime()`), never at module import, so that a host without the package starts, and each user
says in its own words which package is missing (`MissingBindings`).

Users: client CUDA shared memory (`modelhost.engine.shm_cuda`: IPC handles opened, device memory copied to and
from the host) and the TensorRT backend (its streams and device buffers, `backends/tensorrt/cuda.py`).
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import threading
from typing import Any

IPC_HANDLE_SIZE = 64  # sizeof(cudaIpcMemHandle_t), CUDA_IPC_HANDLE_SIZE


class CudaError(RuntimeError):
    pass


class MissingBindings(ImportError):
    """The cuda-bindings package is not installed."""


@functools.cache
def runtime() -> Any:
    """The cuda.bindings.runtime module, or MissingBindings."""
    try:
        return importlib.import_module("cuda.bindings.runtime")
    except ModuleNotFoundError as e:
        raise MissingBindings(str(e)) from e


@functools.cache
def driver() -> Any:
    """The cuda.bindings.driver module (the same package), or MissingBindings."""
    try:
        return importlib.import_module("cuda.bindings.driver")
    except ModuleNotFoundError as e:
        raise MissingBindings(str(e)) from e


def check(rt: Any, result: Any) -> Any:
    """The value(s) of a cuda.bindings runtime call, or CudaError with CUDA's name and description of the error."""
    error, *values = result if isinstance(result, tuple) else (result,)
    if error != rt.cudaError_t.cudaSuccess:
        _, name = rt.cudaGetErrorName(error)
        _, text = rt.cudaGetErrorString(error)
        raise CudaError(f"{_text(name)}: {_text(text)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def device_count() -> int:
    """CUDA devices visible to this process (0 where the driver finds none)."""
    rt = runtime()
    error, count = rt.cudaGetDeviceCount()
    if error != rt.cudaError_t.cudaSuccess:
        return 0
    return int(count)


# -- interprocess memory (client CUDA shared memory) -------------------------------------------------------------


def ipc_open(handle: bytes, device_id: int) -> int:
    """The address in this process of the device memory a client exported with cudaIpcGetMemHandle; the mapping
    covers the whole allocation the handle was made from."""
    if len(handle) != IPC_HANDLE_SIZE:
        raise CudaError(f"a CUDA IPC handle has {IPC_HANDLE_SIZE} bytes, not {len(handle)}")
    if not 0 <= device_id < device_count():
        raise CudaError(f"there is no CUDA device {device_id}")
    rt = runtime()
    check(rt, rt.cudaSetDevice(device_id))
    ipc_handle = rt.cudaIpcMemHandle_t()
    # cuda-bindings 13 has no `reserved` field to assign: the bytes go where the struct lives (as tritonclient
    # reads them from there).
    ctypes.memmove(ipc_handle.getPtr(), handle, IPC_HANDLE_SIZE)
    return int(check(rt, rt.cudaIpcOpenMemHandle(ipc_handle, rt.cudaIpcMemLazyEnablePeerAccess)))


def ipc_close(address: int, device_id: int) -> None:
    rt = runtime()
    check(rt, rt.cudaSetDevice(device_id))  # the thread closing may have another device current
    check(rt, rt.cudaIpcCloseMemHandle(address))


def allocation_size(address: int) -> int:
    """The size of the device allocation that `address` starts (cuMemGetAddressRange)."""
    drv = driver()
    error, _base, size = drv.cuMemGetAddressRange(address)
    if error != drv.CUresult.CUDA_SUCCESS:
        _, text = drv.cuGetErrorString(error)
        raise CudaError(f"Failed to get CUDA address range: {_text(text)}")
    return int(size)


# One non-blocking stream per device for the copies: the legacy default stream would wait for every kernel queued
# on the device (a PyTorch model's, say) and make the next copy wait for it. A copy is synchronised on its stream
# before it returns, so that a client reading its output region after the answer sees the bytes (a copy from
# pageable host memory may return before they reach the device).
_streams: dict[int, Any] = {}
_streams_lock = threading.Lock()


def _stream(rt: Any, device_id: int) -> Any:
    with _streams_lock:
        stream = _streams.get(device_id)
        if stream is None:
            stream = _streams[device_id] = check(rt, rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking))
        return stream


def _copy(dst: int, src: int, nbytes: int, device_id: int, kind: str) -> None:
    if nbytes:
        rt = runtime()
        check(rt, rt.cudaSetDevice(device_id))
        stream = _stream(rt, device_id)
        check(rt, rt.cudaMemcpyAsync(dst, src, nbytes, getattr(rt.cudaMemcpyKind, kind), stream))
        check(rt, rt.cudaStreamSynchronize(stream))


def copy_to_host(host_address: int, device_address: int, nbytes: int, device_id: int) -> None:
    """Copy device memory into host memory; the bytes are there when it returns."""
    _copy(host_address, device_address, nbytes, device_id, "cudaMemcpyDeviceToHost")


def copy_to_device(device_address: int, host_address: int, nbytes: int, device_id: int) -> None:
    """Copy host memory into device memory; the bytes are there when it returns."""
    _copy(device_address, host_address, nbytes, device_id, "cudaMemcpyHostToDevice")


__all__ = [
    "IPC_HANDLE_SIZE",
    "CudaError",
    "MissingBindings",
    "allocation_size",
    "check",
    "copy_to_device",
    "copy_to_host",
    "device_count",
    "driver",
    "ipc_close",
    "ipc_open",
    "runtime",
]
