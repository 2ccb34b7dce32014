"""modelhost.engine.shm_system: windows of POSIX shared-memory objects, read without a copy, written in place, and
checked against the object's size at every access (a shrunk object is an error, not a SIGBUS)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest

from modelhost.engine.shared_memory import SharedMemoryRegistry
from modelhost.engine.shm_lease import Lease
from modelhost.errors import InvalidArgument


@pytest.fixture
def registry() -> Iterator[SharedMemoryRegistry]:
    r = SharedMemoryRegistry(allowed=True)
    yield r
    r.close()


def test_an_input_is_a_read_only_view_without_a_copy(registry: SharedMemoryRegistry, key: str) -> None:
    registry.register("r", key, 8, 32)  # an offset not on a page boundary
    lease = Lease(registry)
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
    lease = Lease(registry)
    with pytest.raises(InvalidArgument, match=message):
        lease.input("r", offset, byte_size)
    with pytest.raises(InvalidArgument, match=message):
        lease.output("OUT", "r", offset, byte_size)
    lease.release()


def test_outputs_are_written_into_the_region(registry: SharedMemoryRegistry, key: str) -> None:
    registry.register("r", key, 16, 32)
    lease = Lease(registry)
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
    lease = Lease(registry)
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
    lease = Lease(registry)
    assert bytes(lease.input("r", 60, 4)) == bytes(range(60, 64))
    lease.release()
