"""modelhost.engine.shared_memory: registration, bounds, views and the life of a region, without a server."""

from __future__ import annotations

import importlib.util
import os
import uuid
from collections.abc import Iterator

import grpc
import numpy as np
import pytest

from cuda_stand_in import HostIpc
from modelhost.engine import shared_memory
from modelhost.engine.shared_memory import (
    CUDA,
    CUDA_NO_BINDINGS,
    CUDA_NO_GPU,
    DISABLED,
    RESERVED_PREFIX,
    RegionInUse,
    SharedMemoryRegistry,
)
from modelhost.errors import AlreadyExists, InvalidArgument, NotFound, Unsupported
from modelhost.frontends.grpc.statuses import grpc_code
from modelhost.frontends.http.statuses import http_status


@pytest.fixture
def key() -> Iterator[str]:
    """A 64-byte shared-memory object, filled with 0..63."""
    name = f"mh_unit_{uuid.uuid4().hex[:10]}"
    path = f"/dev/shm/{name}"
    with open(path, "wb") as f:
        f.write(bytes(range(64)))
    yield "/" + name
    if os.path.exists(path):
        os.unlink(path)


@pytest.fixture
def registry() -> Iterator[SharedMemoryRegistry]:
    r = SharedMemoryRegistry(allowed=True, reserved_prefixes=(RESERVED_PREFIX, "own_prefix_"))
    yield r
    r.close()


def test_register_status_unregister(registry: SharedMemoryRegistry, key: str) -> None:
    registry.register("a", key, 8, 16)
    registry.register("b", key, 0, 64)  # one object, two regions
    assert registry.status() == [
        {"name": "a", "key": key, "offset": 8, "byte_size": 16},
        {"name": "b", "key": key, "offset": 0, "byte_size": 64},
    ]
    assert registry.status("a") == [{"name": "a", "key": key, "offset": 8, "byte_size": 16}]
    registry.unregister("a")
    registry.unregister("nope")
    assert [r["name"] for r in registry.status()] == ["b"]
    registry.unregister()
    assert registry.status() == []
    with pytest.raises(NotFound, match="Unable to find system shared memory region: 'a'"):
        registry.status("a")


@pytest.mark.parametrize(
    ("name", "offset", "byte_size", "error", "message"),
    [
        ("", 0, 8, InvalidArgument, "'region name' is necessary to register system shared memory region"),
        ("r", 0, 65, InvalidArgument, "failed to register shared memory region 'r': invalid args"),
        ("r", 64, 1, InvalidArgument, "failed to register shared memory region 'r': invalid args"),
        (
            "r",
            0,
            0,
            InvalidArgument,
            "failed to register shared memory region 'r': unable to process address",
        ),
    ],
)
def test_bad_registrations(
    registry: SharedMemoryRegistry,
    key: str,
    name: str,
    offset: int,
    byte_size: int,
    error: type,
    message: str,
) -> None:
    with pytest.raises(error, match=message):
        registry.register(name, key, offset, byte_size)
    assert registry.status() == []


@pytest.mark.parametrize("bad_key", ["/nope_mh_unit", "", "/", "/a/b", "/..", "../etc/passwd"])
def test_keys_that_name_no_shared_memory_object(registry: SharedMemoryRegistry, bad_key: str) -> None:
    with pytest.raises(InvalidArgument, match="Unable to open shared memory region"):
        registry.register("r", bad_key, 0, 8)


def test_a_name_registers_once(registry: SharedMemoryRegistry, key: str) -> None:
    registry.register("r", key, 0, 8)
    with pytest.raises(AlreadyExists, match="shared memory region 'r' already in manager"):
        registry.register("r", key, 0, 8)


@pytest.mark.parametrize("prefix", [RESERVED_PREFIX, "own_prefix_"])
def test_reserved_prefixes(registry: SharedMemoryRegistry, prefix: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        registry.register("r", f"/{prefix}x", 0, 8)
    assert str(e.value) == (
        f"cannot register shared memory region 'r' with key '/{prefix}x' as the key contains the reserved prefix "
        f"'{prefix}'"
    )


def test_disabled_registry_refuses_all_but_status(key: str) -> None:
    registry = SharedMemoryRegistry()
    for attempt in (
        lambda: registry.register("r", key, 0, 8),
        lambda: registry.unregister(),
        lambda: registry.lease().input("r", 0, 8),
    ):
        with pytest.raises(Unsupported) as e:
            attempt()
        assert str(e.value) == DISABLED
    assert registry.status() == []


def test_an_input_is_a_read_only_view_without_a_copy(registry: SharedMemoryRegistry, key: str) -> None:
    registry.register("r", key, 8, 32)  # an offset not on a page boundary
    lease = registry.lease()
    array = np.frombuffer(lease.input("r", 4, 8), dtype=np.uint8)
    assert array.tolist() == list(range(12, 20))
    assert not array.flags.writeable
    with open(f"/dev/shm{key}", "r+b") as f:  # the client writes after the request was decoded
        f.seek(12)
        f.write(b"\xff")
    assert array[0] == 255
    lease.release()


@pytest.mark.parametrize(
    ("offset", "byte_size", "message"),
    [
        (32, 0, "Invalid offset for shared memory region: 'r'"),
        (30, 4, r"Invalid offset \+ byte size for shared memory region: 'r'"),
        (8, 2**64 - 4, "Integer overflow detected: byte_size"),
    ],
)
def test_bounds(registry: SharedMemoryRegistry, key: str, offset: int, byte_size: int, message: str) -> None:
    registry.register("r", key, 8, 32)
    lease = registry.lease()
    with pytest.raises(InvalidArgument, match=message):
        lease.input("r", offset, byte_size)
    with pytest.raises(InvalidArgument, match=message):
        lease.output("OUT", "r", offset, byte_size)
    lease.release()


def test_outputs_are_written_into_the_region(registry: SharedMemoryRegistry, key: str) -> None:
    registry.register("r", key, 16, 32)
    lease = registry.lease()
    lease.output("A", "r", 4, 8)
    lease.output("S", "r", 12, 20)
    assert lease.write("A", "INT32", np.array([7, -1], dtype=np.int32))
    assert lease.write("S", "BYTES", np.array([b"hey"], dtype=object))
    assert not lease.write("other", "INT32", np.zeros(1, np.int32))
    with pytest.raises(InvalidArgument) as e:
        lease.write("A", "INT32", np.zeros(3, np.int32))
    assert str(e.value) == (
        "shared memory size specified with the request for output 'A' (8 bytes) should be at least 12 bytes to "
        "hold the results"
    )
    lease.release()
    with open(f"/dev/shm{key}", "rb") as f:
        data = f.read()
    assert np.frombuffer(data[20:28], np.int32).tolist() == [7, -1]
    assert data[28:35] == b"\x03\x00\x00\x00hey"


def test_a_shrunk_object_is_refused_not_a_crash(registry: SharedMemoryRegistry, key: str) -> None:
    registry.register("r", key, 0, 64)
    os.truncate(f"/dev/shm{key}", 16)
    lease = registry.lease()
    assert bytes(lease.input("r", 0, 16)) == bytes(range(16))
    with pytest.raises(InvalidArgument, match="shared memory region 'r' no longer fits its object"):
        lease.input("r", 8, 16)
    with pytest.raises(InvalidArgument, match="no longer fits its object"):
        lease.output("BIG", "r", 0, 64)
    lease.output("OUT", "r", 0, 16)
    os.truncate(f"/dev/shm{key}", 4)  # shrunk again while the model ran: the write checks again
    with pytest.raises(InvalidArgument, match="no longer fits its object"):
        lease.write("OUT", "UINT8", np.zeros(16, np.uint8))
    lease.release()


def test_an_unlinked_object_stays_mapped(registry: SharedMemoryRegistry, key: str) -> None:
    registry.register("r", key, 0, 64)
    os.unlink(f"/dev/shm{key}")
    lease = registry.lease()
    assert bytes(lease.input("r", 60, 4)) == bytes(range(60, 64))
    lease.release()


def test_a_region_in_use_cannot_be_unregistered(registry: SharedMemoryRegistry, key: str) -> None:
    """As Triton: a region stays registered while a request uses it, and unregistering all regions unregisters
    the others and names those in use."""
    registry.register("r", key, 0, 64)
    registry.register("idle", key, 0, 8)
    registry.register("out", key, 32, 32)
    first, second = registry.lease(), registry.lease()
    view = first.input("r", 0, 8)
    held = second.input("r", 8, 8)
    second.output("OUT", "out", 0, 8)
    with pytest.raises(
        RegionInUse, match=r"^Cannot unregister shared memory region 'r', it is currently in use\.$"
    ):
        registry.unregister("r")
    assert (http_status(RegionInUse("r")), grpc_code(RegionInUse("r"))) == (
        409,
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    with pytest.raises(RegionInUse) as e:
        registry.unregister()
    assert str(e.value) == "Failed to unregister the following system shared memory regions: out ,r ,"
    assert sorted(r["name"] for r in registry.status()) == ["out", "r"]  # "idle" went
    third = registry.lease()
    assert bytes(third.input("r", 0, 8)) == bytes(range(8))  # new requests may still use it
    first.release()
    third.release()
    with pytest.raises(RegionInUse, match="'r', it is currently in use"):
        registry.unregister("r")  # the second request still uses it
    with pytest.raises(RegionInUse, match="'out', it is currently in use"):
        registry.unregister("out")  # an output region too: the answer is written into it later
    assert bytes(view) == bytes(range(8)) and bytes(held) == bytes(range(8, 16))
    second.release()
    registry.unregister("r")
    registry.unregister()
    assert registry.status() == []


def test_only_regions_of_the_kind_asked_are_in_the_error(registry: SharedMemoryRegistry, key: str) -> None:
    registry.register("r", key, 0, 64)
    lease = registry.lease()
    lease.input("r", 0, 8)
    registry.unregister("r", CUDA)  # another kind's endpoint: no such region, no error
    registry.unregister(kind=CUDA)
    lease.release()


def test_close_unmaps_everything(key: str) -> None:
    registry = SharedMemoryRegistry(allowed=True)
    registry.register("a", key, 0, 64)
    registry.register("b", key, 0, 8)
    held = registry.lease()
    held.input("b", 0, 8)
    registry.close()
    assert registry.status() == []
    held.release()  # a request that outlived the shutdown closes its region itself


# --- CUDA regions, through a stand-in for CUDA's IPC whose "device memory" is host memory


@pytest.fixture
def ipc() -> HostIpc:
    return HostIpc()


@pytest.fixture
def cuda_registry(ipc: HostIpc) -> Iterator[SharedMemoryRegistry]:
    r = SharedMemoryRegistry(allowed=True, cuda_ipc=ipc)
    yield r
    r.close()


def test_cuda_register_status_unregister(cuda_registry: SharedMemoryRegistry, ipc: HostIpc, key: str) -> None:
    handle = ipc.allocate(bytes(64))
    cuda_registry.register_cuda("c", handle, 0, 48)
    cuda_registry.register("s", key, 0, 8)
    assert cuda_registry.status(kind=CUDA) == [{"name": "c", "device_id": 0, "byte_size": 48}]
    assert cuda_registry.status("c", CUDA) == [{"name": "c", "device_id": 0, "byte_size": 48}]
    assert [r["name"] for r in cuda_registry.status()] == ["s"]
    # One namespace: a name is taken whatever the kind.
    with pytest.raises(AlreadyExists, match="shared memory region 'c' already in manager"):
        cuda_registry.register("c", key, 0, 8)
    with pytest.raises(AlreadyExists, match="shared memory region 's' already in manager"):
        cuda_registry.register_cuda("s", handle, 0, 8)
    # Each kind's endpoints see their own regions, in Triton's words.
    with pytest.raises(
        NotFound, match="The region named 'c' is registered as CUDA shared memory, not system"
    ):
        cuda_registry.status("c")
    with pytest.raises(
        NotFound, match="The region named 's' is registered as system shared memory, not CUDA"
    ):
        cuda_registry.status("s", CUDA)
    with pytest.raises(NotFound, match="Unable to find cuda shared memory region: 'x'"):
        cuda_registry.status("x", CUDA)
    cuda_registry.unregister("c")  # the system kind: leaves the CUDA region alone
    cuda_registry.unregister(kind=CUDA)  # every CUDA region: leaves the system one alone
    assert cuda_registry.status(kind=CUDA) == []
    assert [r["name"] for r in cuda_registry.status()] == ["s"]
    assert ipc.closed == list(ipc.opened)


def test_cuda_inputs_are_copied_from_the_device_and_outputs_to_it(
    cuda_registry: SharedMemoryRegistry, ipc: HostIpc
) -> None:
    handle = ipc.allocate(bytes(range(64)))
    cuda_registry.register_cuda("c", handle, 1, 64)
    lease = cuda_registry.lease()
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


def test_a_cuda_region_in_use_cannot_be_unregistered(
    cuda_registry: SharedMemoryRegistry, ipc: HostIpc, key: str
) -> None:
    cuda_registry.register_cuda("c", ipc.allocate(bytes(16)), 0, 16)
    cuda_registry.register_cuda("d", ipc.allocate(bytes(16)), 0, 16)
    cuda_registry.register_cuda("idle", ipc.allocate(bytes(16)), 0, 16)
    cuda_registry.register("s", key, 0, 8)
    lease = cuda_registry.lease()
    lease.input("c", 0, 4)
    lease.output("OUT", "d", 0, 4)
    lease.input("s", 0, 4)
    with pytest.raises(
        RegionInUse, match=r"^Cannot unregister shared memory region 'c', it is currently in use\.$"
    ):
        cuda_registry.unregister("c", CUDA)
    with pytest.raises(RegionInUse) as e:
        cuda_registry.unregister(kind=CUDA)
    assert str(e.value) == "Failed to unregister the following cuda shared memory regions: c ,d ,"
    assert len(ipc.closed) == 1  # "idle"
    assert [r["name"] for r in cuda_registry.status(kind=CUDA)] == ["c", "d"]
    lease.release()
    cuda_registry.unregister(kind=CUDA)
    assert cuda_registry.status(kind=CUDA) == [] and len(ipc.closed) == 3
    cuda_registry.unregister()


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


def test_cuda_registration_needs_a_name_and_client_shm(ipc: HostIpc) -> None:
    with pytest.raises(
        InvalidArgument, match="'region name' is necessary to register cuda shared memory region"
    ):
        SharedMemoryRegistry(allowed=True, cuda_ipc=ipc).register_cuda("", b"\0" * 64, 0, 8)
    with pytest.raises(Unsupported, match="Client shared memory is disabled"):
        SharedMemoryRegistry(allowed=False, cuda_ipc=ipc).register_cuda("c", b"\0" * 64, 0, 8)


def test_without_a_gpu_cuda_registration_is_refused_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_memory, "gpu_count", lambda: 0)
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
    monkeypatch.setattr(shared_memory, "gpu_count", lambda: 1)
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
