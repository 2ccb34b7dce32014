"""modelhost.shared_memory: registration, bounds, views and the life of a region, without a server."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from modelhost.errors import AlreadyExists, InvalidArgument, NotFound, Unsupported
from modelhost.shared_memory import DISABLED, RESERVED_PREFIX, SharedMemoryRegistry


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


def test_unregistering_a_region_in_use_ends_it_for_new_requests_only(
    registry: SharedMemoryRegistry, key: str
) -> None:
    registry.register("r", key, 0, 64)
    first, second = registry.lease(), registry.lease()
    view = first.input("r", 0, 8)
    held = second.input("r", 8, 8)
    registry.unregister("r")
    assert registry.status() == []  # gone for new requests at once: steady traffic cannot keep it alive
    with pytest.raises(NotFound):
        registry.lease().input("r", 0, 8)
    registry.register("r", key, 0, 64)  # the name is free again
    first.release()
    second.release()
    assert bytes(view) == bytes(range(8)) and bytes(held) == bytes(
        range(8, 16)
    )  # the requests' views still read


def test_close_unmaps_everything(key: str) -> None:
    registry = SharedMemoryRegistry(allowed=True)
    registry.register("a", key, 0, 64)
    registry.register("b", key, 0, 8)
    held = registry.lease()
    held.input("b", 0, 8)
    registry.close()
    assert registry.status() == []
    held.release()  # a request that outlived the shutdown closes its region itself
