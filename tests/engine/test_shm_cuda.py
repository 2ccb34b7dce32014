"""modelhost.engine.shm_cuda: device memory shared through CUDA IPC handles, through a stand-in for CUDA's IPC whose
"device memory" is host memory; and the reasons a server without a GPU or CUDA's bindings refuses it."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import numpy as np
import pytest

from cuda_stand_in import HostIpc
from modelhost.engine import shm_cuda
from modelhost.engine.shared_memory import SharedMemoryRegistry
from modelhost.engine.shm_cuda import CUDA, CUDA_NO_BINDINGS, CUDA_NO_GPU
from modelhost.engine.shm_lease import Lease
from modelhost.errors import InvalidArgument, Unsupported


@pytest.fixture
def cuda_registry(ipc: HostIpc) -> Iterator[SharedMemoryRegistry]:
    r = SharedMemoryRegistry(allowed=True, cuda_ipc=ipc)
    yield r
    r.close()


def test_cuda_inputs_are_copied_from_the_device_and_outputs_to_it(
    cuda_registry: SharedMemoryRegistry, ipc: HostIpc
) -> None:
    handle = ipc.allocate(bytes(range(64)))
    cuda_registry.register_cuda("c", handle, 1, 64)
    lease = Lease(cuda_registry)
    data = np.frombuffer(lease.input("c", 16, 8), dtype=np.uint8)
    assert data.tolist() == list(range(16, 24))
    assert not data.flags.writeable
    lease.output("OUT", "c", 32, 8)
    assert lease.write("OUT", "INT32", np.array([7, -1], dtype=np.int32))
    assert ipc.contents(handle)[32:40] == np.array([7, -1], dtype=np.int32).tobytes()
    assert set(ipc.devices) == {1}
    with pytest.raises(InvalidArgument, match="should be at least 12 bytes"):
        lease.output("BIG", "c", 56, 8)
        lease.write("BIG", "INT32", np.zeros(3, dtype=np.int32))
    with pytest.raises(InvalidArgument, match="Invalid offset \\+ byte size for shared memory region: 'c'"):
        lease.input("c", 60, 8)
    with pytest.raises(InvalidArgument, match="Invalid offset for shared memory region: 'c'"):
        lease.input("c", 64, 1)
    lease.release()


@pytest.mark.parametrize(
    ("handle", "device_id", "byte_size", "message"),
    [
        (b"\0" * 63, 0, 8, "'raw_handle' must be a cudaIpcMemHandle_t of 64 bytes, not 63 bytes"),
        (b"\1" * 64, 0, 8, "failed to register shared memory region: invalid args"),  # CUDA cannot open it
        (None, 0, 65, "failed to register shared memory region 'c': invalid args"),  # past the allocation
        (None, -1, 8, "failed to register shared memory region 'c': invalid args"),
        (None, 2**40, 8, "failed to register shared memory region 'c': invalid args"),  # past a C int
    ],
)
def test_cuda_registration_errors(
    cuda_registry: SharedMemoryRegistry,
    ipc: HostIpc,
    handle: bytes | None,
    device_id: int,
    byte_size: int,
    message: str,
) -> None:
    with pytest.raises(InvalidArgument) as info:
        cuda_registry.register_cuda(
            "c", ipc.allocate(bytes(64)) if handle is None else handle, device_id, byte_size
        )
    assert info.value.message == message
    assert cuda_registry.status(kind=CUDA) == []
    assert ipc.closed == list(ipc.opened)  # a handle opened for a refused region is closed again


def test_without_a_gpu_cuda_registration_is_refused_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shm_cuda, "gpu_count", lambda: 0)
    registry = SharedMemoryRegistry(allowed=True)
    assert not registry.cuda_available()
    with pytest.raises(Unsupported) as info:
        registry.register_cuda("c", b"\0" * 64, 0, 8)
    assert info.value.message == CUDA_NO_GPU
    assert registry.status(kind=CUDA) == []
    registry.unregister(kind=CUDA)  # nothing to do, no error


def test_with_a_gpu_and_no_cuda_bindings_the_reason_names_the_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if importlib.util.find_spec("cuda") is not None and importlib.util.find_spec("cuda.bindings") is not None:
        pytest.skip("cuda-bindings is installed here")
    monkeypatch.setattr(shm_cuda, "gpu_count", lambda: 1)
    with pytest.raises(Unsupported) as info:
        SharedMemoryRegistry(allowed=True).register_cuda("c", b"\0" * 64, 0, 8)
    assert info.value.message == CUDA_NO_BINDINGS
    assert "pip install 'modelhost[cuda]'" in CUDA_NO_BINDINGS


def test_a_binding_error_while_opening_is_a_clear_refusal_and_closes_the_handle(ipc: HostIpc) -> None:
    class Failing(HostIpc):
        def allocation_size(self, address: int) -> int:
            raise OSError("libcuda.so.1 cannot be loaded")  # not a CudaError: the binding's own

    failing = Failing()
    registry = SharedMemoryRegistry(allowed=True, cuda_ipc=failing)
    with pytest.raises(InvalidArgument, match="failed to register shared memory region 'c': invalid args"):
        registry.register_cuda("c", failing.allocate(bytes(8)), 0, 8)
    assert failing.closed == list(failing.opened)
    assert registry.status(kind=CUDA) == []
