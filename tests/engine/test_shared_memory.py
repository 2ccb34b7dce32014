"""modelhost.engine.shared_memory: registration, status, unregistration and the life of a region in the registry
(system and CUDA regions, one namespace), without a server."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from cuda_stand_in import HostIpc
from modelhost.engine.shared_memory import DISABLED, RESERVED_PREFIX, RegionInUse, SharedMemoryRegistry
from modelhost.engine.shm_cuda import CUDA
from modelhost.engine.shm_lease import Lease
from modelhost.errors import AlreadyExists, InvalidArgument, NotFound, Unsupported
from modelhost.frontends.grpc.statuses import grpc_code
from modelhost.frontends.http.statuses import http_status


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
        lambda: Lease(registry).input("r", 0, 8),
    ):
        with pytest.raises(Unsupported) as e:
            attempt()
        assert str(e.value) == DISABLED
    assert registry.status() == []


def test_a_region_in_use_cannot_be_unregistered(registry: SharedMemoryRegistry, key: str) -> None:
    """As Triton: a region stays registered while a request uses it, and unregistering all regions unregisters
    the others and names those in use."""
    registry.register("r", key, 0, 64)
    registry.register("idle", key, 0, 8)
    registry.register("out", key, 32, 32)
    first, second = Lease(registry), Lease(registry)
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
    third = Lease(registry)
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
    lease = Lease(registry)
    lease.input("r", 0, 8)
    registry.unregister("r", CUDA)  # another kind's endpoint: no such region, no error
    registry.unregister(kind=CUDA)
    lease.release()


def test_close_unmaps_everything(key: str) -> None:
    registry = SharedMemoryRegistry(allowed=True)
    registry.register("a", key, 0, 64)
    registry.register("b", key, 0, 8)
    held = Lease(registry)
    held.input("b", 0, 8)
    registry.close()
    assert registry.status() == []
    held.release()  # a request that outlived the shutdown closes its region itself


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


def test_a_cuda_region_in_use_cannot_be_unregistered(
    cuda_registry: SharedMemoryRegistry, ipc: HostIpc, key: str
) -> None:
    cuda_registry.register_cuda("c", ipc.allocate(bytes(16)), 0, 16)
    cuda_registry.register_cuda("d", ipc.allocate(bytes(16)), 0, 16)
    cuda_registry.register_cuda("idle", ipc.allocate(bytes(16)), 0, 16)
    cuda_registry.register("s", key, 0, 8)
    lease = Lease(cuda_registry)
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


def test_cuda_registration_needs_a_name_and_client_shm(ipc: HostIpc) -> None:
    with pytest.raises(
        InvalidArgument, match="'region name' is necessary to register cuda shared memory region"
    ):
        SharedMemoryRegistry(allowed=True, cuda_ipc=ipc).register_cuda("", b"\0" * 64, 0, 8)
    with pytest.raises(Unsupported, match="Client shared memory is disabled"):
        SharedMemoryRegistry(allowed=False, cuda_ipc=ipc).register_cuda("c", b"\0" * 64, 0, 8)
