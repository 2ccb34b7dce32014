"""System shared memory (Triton's `system_shared_memory` extension): a client creates a POSIX shared-memory object
(`/dev/shm/<key>`), registers a window of it (offset, byte size) under a name, and then names that region in
inference requests: inputs are read from it (a read-only numpy view over the mapping, no copy), outputs are written
into it. Messages follow Triton's (shared_memory_manager.cc).

Safety: the object's descriptor stays open while the region is registered, and its current size is checked
against every access (fstat), so a client that shrinks the object gets an error instead of a SIGBUS in the
server; an object the client unlinks stays mapped until the region is unregistered. (A shrink that races an
access already checked, or an input view a model still reads after the check, is not covered: POSIX offers no
way to fault-proof a shared mapping.)
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat
from dataclasses import dataclass
from typing import Any, ClassVar

from modelhost.errors import InvalidArgument

SYSTEM = "system"
SHM_DIR = "/dev/shm"
_SIZE_MAX = 2**64 - 1


def check_window(name: str, size: int, offset: int, byte_size: int) -> None:
    """[offset, offset + byte_size) must lie in a region of `size` bytes: Triton's checks and words (for either
    kind of region)."""
    if offset >= size:
        raise InvalidArgument(f"Invalid offset for shared memory region: '{name}'")
    if byte_size > _SIZE_MAX - offset:
        raise InvalidArgument(
            f"Integer overflow detected: byte_size ({byte_size}) + offset ({offset}) exceeds maximum value "
            f"({_SIZE_MAX}) for region '{name}'"
        )
    if offset + byte_size > size:
        raise InvalidArgument(f"Invalid offset + byte size for shared memory region: '{name}'")


@dataclass(slots=True, eq=False)
class Region:
    """A registered window of a POSIX shared-memory object."""

    kind: ClassVar[str] = SYSTEM
    name: str
    key: str
    offset: int  # in the shared-memory object
    byte_size: int
    _fd: int
    _map: mmap.mmap
    _start: int  # where `offset` lies in the mapping (the mapping starts at a page boundary)
    users: int = 0
    unregistering: bool = False
    closed: bool = False

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}

    def check_window(self, offset: int, byte_size: int) -> slice:
        """The bytes [offset, offset + byte_size) of the region in the mapping, checked as Triton checks them and
        against the object's size now."""
        check_window(self.name, self.byte_size, offset, byte_size)
        try:
            size = os.fstat(self._fd).st_size
        except OSError as e:
            raise InvalidArgument(f"Invalid shared memory region: '{self.key}'") from e
        if self.offset + offset + byte_size > size:
            # Touching mapped pages past the end of the object would kill the server with SIGBUS.
            raise InvalidArgument(
                f"shared memory region '{self.name}' no longer fits its object '{self.key}': the object holds "
                f"{size} bytes, the access needs bytes up to {self.offset + offset + byte_size}"
            )
        start = self._start + offset
        return slice(start, start + byte_size)

    def view(self, offset: int, byte_size: int) -> memoryview:
        """A read-only view of part of the region (no copy)."""
        return memoryview(self._map)[self.check_window(offset, byte_size)].toreadonly()

    def write(self, offset: int, data: bytes | memoryview) -> None:
        memoryview(self._map)[self.check_window(offset, len(data))] = data

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        # A numpy view of an input may still exist: then the mapping goes when the last view does.
        with contextlib.suppress(BufferError):
            self._map.close()
        os.close(self._fd)


def _open_object(key: str) -> int:
    """The descriptor of shared-memory object `key`, as shm_open(3) names them: one leading '/' at most."""
    name = key[1:] if key.startswith("/") else key
    if not name or "/" in name or name in (".", ".."):
        raise InvalidArgument(f"Unable to open shared memory region: '{key}'")
    try:
        fd = os.open(os.path.join(SHM_DIR, name), os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise InvalidArgument(f"Unable to open shared memory region: '{key}'") from e
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidArgument(f"Invalid shared memory region: '{key}'")
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_region(name: str, key: str, offset: int, byte_size: int) -> Region:
    """Map the window [offset, offset + byte_size) of object `key` (arguments already checked for sign)."""
    fd = _open_object(key)
    try:
        size = os.fstat(fd).st_size
        if offset + byte_size > size:
            raise InvalidArgument(f"failed to register shared memory region '{name}': invalid args")
        if byte_size == 0:
            # mmap(2) refuses an empty mapping; Triton passes on its EINVAL.
            raise InvalidArgument(
                f"failed to register shared memory region '{name}': unable to process address space"
                "Invalid argument"
            )
        start = offset % mmap.ALLOCATIONGRANULARITY
        try:
            mapping = mmap.mmap(
                fd,
                start + byte_size,
                flags=mmap.MAP_SHARED,
                prot=mmap.PROT_READ | mmap.PROT_WRITE,
                offset=offset - start,
            )
        except (OSError, ValueError, OverflowError) as e:
            raise InvalidArgument(
                f"failed to register shared memory region '{name}': unable to process address space{e}"
            ) from e
    except BaseException:
        os.close(fd)
        raise
    return Region(name, key, offset, byte_size, fd, mapping, start)
