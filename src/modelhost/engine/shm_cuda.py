"""CUDA shared memory (Triton's `cuda_shared_memory` extension): a client allocates device memory, exports it with
cudaIpcGetMemHandle and registers the raw handle under a name; the server opens the handle once (`CudaIpc.open`,
which maps the client's whole allocation) and closes it when the region is unregistered. Inputs named in such a
region are copied from the device into a new host buffer, outputs from the host into the device memory
(`CudaRegion.view` / `write`): modelhost's backends take host arrays, and a copy of the bytes of one request costs
microseconds against the IPC open that is done once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from modelhost.engine.shm_system import check_window
from modelhost.errors import InvalidArgument
from modelhost.host import cuda_runtime
from modelhost.host.devices import gpu_count

log = logging.getLogger("modelhost.shared_memory")

CUDA = "cuda"
CUDA_NO_GPU = "CUDA shared memory requires a GPU, and this server has none"
CUDA_NO_BINDINGS = (
    "CUDA shared memory needs the Python package 'cuda-bindings' (NVIDIA's CUDA runtime bindings), which is not "
    "installed on this server; install it with: pip install 'modelhost[cuda]'"
)


class CudaIpc(Protocol):
    """The device memory behind CUDA regions: CUDA's IPC and copies (`RUNTIME_IPC`; tests use a stand-in)."""

    def open(self, handle: bytes, device_id: int) -> int: ...

    def allocation_size(self, address: int) -> int: ...

    def close(self, address: int, device_id: int) -> None: ...

    def to_host(self, host_address: int, address: int, nbytes: int, device_id: int) -> None: ...

    def to_device(self, address: int, host_address: int, nbytes: int, device_id: int) -> None: ...


class _RuntimeIpc:
    """CudaIpc through the CUDA runtime (modelhost.host.cuda_runtime)."""

    def open(self, handle: bytes, device_id: int) -> int:
        return cuda_runtime.ipc_open(handle, device_id)

    def allocation_size(self, address: int) -> int:
        return cuda_runtime.allocation_size(address)

    def close(self, address: int, device_id: int) -> None:
        cuda_runtime.ipc_close(address, device_id)

    def to_host(self, host_address: int, address: int, nbytes: int, device_id: int) -> None:
        cuda_runtime.copy_to_host(host_address, address, nbytes, device_id)

    def to_device(self, address: int, host_address: int, nbytes: int, device_id: int) -> None:
        cuda_runtime.copy_to_device(address, host_address, nbytes, device_id)


RUNTIME_IPC: CudaIpc = _RuntimeIpc()


def cuda_unavailable() -> str | None:
    """Why this server cannot open CUDA IPC handles, or None when it can."""
    if gpu_count() == 0:
        return CUDA_NO_GPU
    try:
        cuda_runtime.runtime()
        cuda_runtime.driver()
    except cuda_runtime.MissingBindings:
        return CUDA_NO_BINDINGS
    return None


def _host_address(data: bytes | bytearray | memoryview) -> int:
    """The address of a C-contiguous host buffer (read-only ones too), for a CUDA copy."""
    return int(np.frombuffer(data, dtype=np.uint8).ctypes.data)


@dataclass(slots=True, eq=False)
class CudaRegion:
    """Device memory a client shared through a CUDA IPC handle, opened in this process."""

    kind: ClassVar[str] = CUDA
    name: str
    device_id: int
    byte_size: int
    _address: int  # where the client's allocation is mapped in this process
    _ipc: CudaIpc
    users: int = 0
    unregistering: bool = False
    closed: bool = False

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "device_id": self.device_id, "byte_size": self.byte_size}

    def check_window(self, offset: int, byte_size: int) -> None:
        check_window(self.name, self.byte_size, offset, byte_size)

    def view(self, offset: int, byte_size: int) -> memoryview:
        """A host copy of part of the region."""
        self.check_window(offset, byte_size)
        host = bytearray(byte_size)
        if byte_size:
            self._ipc.to_host(_host_address(host), self._address + offset, byte_size, self.device_id)
        return memoryview(host).toreadonly()

    def write(self, offset: int, data: bytes | memoryview) -> None:
        self.check_window(offset, len(data))
        if len(data):
            self._ipc.to_device(self._address + offset, _host_address(data), len(data), self.device_id)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._ipc.close(self._address, self.device_id)
        except Exception as e:  # CudaError, or the binding's own: logged, the server goes on
            log.error("failed to close CUDA IPC handle of shared memory region '%s': %s", self.name, e)


def open_cuda_region(ipc: CudaIpc, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> CudaRegion:
    """Open a client's IPC handle; the region of its first `byte_size` bytes, which must lie in the allocation."""
    try:
        address = ipc.open(raw_handle, device_id)
    except Exception as e:  # CudaError, or the binding's own (a device id it cannot take)
        # As Triton: CUDA's reason in the log, a plain one to the client.
        log.error("failed to open CUDA IPC handle of shared memory region '%s': %s", name, e)
        raise InvalidArgument("failed to register shared memory region: invalid args") from e
    try:
        size = ipc.allocation_size(address)
    except Exception as e:
        log.error("%s (shared memory region '%s')", e, name)
        size = -1
    if byte_size > size:
        try:
            ipc.close(address, device_id)
        except Exception as e:
            log.error("failed to close CUDA IPC handle of shared memory region '%s': %s", name, e)
        raise InvalidArgument(f"failed to register shared memory region '{name}': invalid args")
    return CudaRegion(name, device_id, byte_size, address, ipc)
