"""A stand-in for CUDA's interprocess memory whose "device memory" is host memory, for the tests of CUDA shared
memory on a host without a GPU (the real thing runs in the `gpu` tests)."""

from __future__ import annotations

import ctypes
import uuid

from modelhost.host.cuda_runtime import CudaError


class HostIpc:
    """CudaIpc over host buffers: a handle names an allocation made by `allocate`; copies are memmoves. It
    records what the registry asks of it, so that the tests see every handle closed."""

    def __init__(self) -> None:
        self.allocations: dict[bytes, ctypes.Array[ctypes.c_char]] = {}
        self.opened: dict[int, bytes] = {}
        self.closed: list[int] = []
        self.devices: list[int] = []

    def allocate(self, data: bytes) -> bytes:
        handle = uuid.uuid4().bytes * 4  # 64 bytes, as a cudaIpcMemHandle_t
        self.allocations[handle] = ctypes.create_string_buffer(data, len(data))
        return handle

    def contents(self, handle: bytes) -> bytes:
        return self.allocations[handle].raw

    def open(self, handle: bytes, device_id: int) -> int:
        if handle not in self.allocations:
            raise CudaError("cudaErrorInvalidValue: invalid argument")
        self.devices.append(device_id)
        address = ctypes.addressof(self.allocations[handle])
        self.opened[address] = handle
        return address

    def allocation_size(self, address: int) -> int:
        return len(self.allocations[self.opened[address]])

    def close(self, address: int, device_id: int) -> None:
        self.closed.append(address)

    def to_host(self, host_address: int, address: int, nbytes: int, device_id: int) -> None:
        ctypes.memmove(host_address, address, nbytes)

    def to_device(self, address: int, host_address: int, nbytes: int, device_id: int) -> None:
        ctypes.memmove(address, host_address, nbytes)
