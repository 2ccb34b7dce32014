"""Client system shared memory (Triton's `system_shared_memory` extension): the regions, their mappings, bounds.

A client creates a POSIX shared-memory object (`/dev/shm/<key>`), registers a window of it (offset, byte size)
under a name, and then names that region in inference requests: inputs are read from it (a read-only numpy view
over the mapping, no copy), outputs are written into it. Messages follow Triton's (shared_memory_manager.cc).

Safety: the object's descriptor stays open while the region is registered, and its current size is checked
against every access (fstat), so a client that shrinks the object gets an error instead of a SIGBUS in the
server; an object the client unlinks stays mapped until the region is unregistered. (A shrink that races an
access already checked, or an input view a model still reads after the check, is not covered: POSIX offers no
way to fault-proof a shared mapping.) A region in use by a request when it is unregistered stays until that
request is done, as in Triton.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from modelhost.errors import AlreadyExists, InvalidArgument, NotFound, Unsupported
from modelhost.tensor_codec import raw_bytes

# Triton's kTritonSharedMemoryRegionPrefix: the python backend's own regions; no client key may start with it.
RESERVED_PREFIX = "triton_python_backend_shm_region_"
DISABLED = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
CUDA_UNSUPPORTED = "CUDA shared memory is not supported: modelhost serves system shared memory only"
CUDA_NO_GPU = "CUDA shared memory requires a GPU, and this server has none"
SHM_DIR = "/dev/shm"
_SIZE_MAX = 2**64 - 1


@dataclass(slots=True, eq=False)
class Region:
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

    def _window(self, offset: int, byte_size: int) -> slice:
        """The bytes [offset, offset + byte_size) of the region in the mapping, checked as Triton checks them and
        against the object's size now."""
        if offset >= self.byte_size:
            raise InvalidArgument(f"Invalid offset for shared memory region: '{self.name}'")
        if byte_size > _SIZE_MAX - offset:
            raise InvalidArgument(
                f"Integer overflow detected: byte_size ({byte_size}) + offset ({offset}) exceeds maximum value "
                f"({_SIZE_MAX}) for region '{self.name}'"
            )
        if offset + byte_size > self.byte_size:
            raise InvalidArgument(f"Invalid offset + byte size for shared memory region: '{self.name}'")
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
        return memoryview(self._map)[self._window(offset, byte_size)].toreadonly()

    def write(self, offset: int, data: bytes | memoryview) -> None:
        memoryview(self._map)[self._window(offset, len(data))] = data

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


@dataclass(slots=True)
class OutputTarget:
    region: Region
    offset: int
    byte_size: int


@dataclass(slots=True, eq=False)
class Lease:
    """The regions one inference request uses, held from its decoding until its answer is written."""

    registry: SharedMemoryRegistry
    held: list[Region] = field(default_factory=list)
    outputs: dict[str, OutputTarget] = field(default_factory=dict)

    def _region(self, name: str) -> Region:
        for region in self.held:
            if region.name == name:
                return region
        region = self.registry.acquire(name)
        self.held.append(region)
        return region

    def input(self, region: str, offset: int, byte_size: int) -> memoryview:
        """The bytes of an input, a view of the region."""
        return self._region(region).view(offset, byte_size)

    def output(self, output: str, region: str, offset: int, byte_size: int) -> None:
        """Output `output` goes into the region: checked now, written by `write`."""
        target = self._region(region)
        target._window(offset, byte_size)
        self.outputs[output] = OutputTarget(target, offset, byte_size)

    def write(self, output: str, datatype: str, data: npt.NDArray[Any]) -> bool:
        """Write an output requested in shared memory into its region; False when it was not requested so."""
        target = self.outputs.get(output)
        if target is None:
            return False
        if datatype == "BYTES":
            blob: bytes | memoryview = raw_bytes(datatype, data)
        else:
            blob = np.ascontiguousarray(data).reshape(-1).view(np.uint8).data
        if len(blob) > target.byte_size:
            # Triton answers this one 500 / INTERNAL; it is the request's fault.
            raise InvalidArgument(
                f"shared memory size specified with the request for output '{output}' ({target.byte_size} bytes) "
                f"should be at least {len(blob)} bytes to hold the results"
            )
        if len(blob):
            target.region.write(target.offset, blob)
        return True

    def release(self) -> None:
        held, self.held = self.held, []
        self.outputs.clear()
        for region in held:
            self.registry.release(region)


class SharedMemoryRegistry:
    """The registered system shared-memory regions of a server, by name."""

    def __init__(
        self, *, allowed: bool = False, reserved_prefixes: tuple[str, ...] = (RESERVED_PREFIX,)
    ) -> None:
        self.allowed = allowed
        self.reserved_prefixes = reserved_prefixes
        self._regions: dict[str, Region] = {}
        self._lock = threading.Lock()

    def check_allowed(self) -> None:
        if not self.allowed:
            raise Unsupported(DISABLED)

    def lease(self) -> Lease:
        return Lease(self)

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.check_allowed()
        if not name:
            raise InvalidArgument("'region name' is necessary to register system shared memory region")
        for prefix in self.reserved_prefixes:
            if key.lstrip("/").startswith(prefix):
                raise InvalidArgument(
                    f"cannot register shared memory region '{name}' with key '{key}' as the key contains the "
                    f"reserved prefix '{prefix}'"
                )
        if offset < 0 or byte_size < 0:
            raise InvalidArgument(f"failed to register shared memory region '{name}': invalid args")
        with self._lock:
            if name in self._regions:
                raise AlreadyExists(f"shared memory region '{name}' already in manager")
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
            self._regions[name] = Region(name, key, offset, byte_size, fd, mapping, start)

    def unregister(self, name: str = "") -> None:
        """Unregister one region ("" = all). An unknown name is no error, as in Triton."""
        self.check_allowed()
        with self._lock:
            names = [name] if name else list(self._regions)
            for n in names:
                region = self._regions.get(n)
                if region is None:
                    continue
                # Gone at once: no new request may use it and the name is free to register again; a request
                # still using it keeps the mapping, which its release closes.
                del self._regions[n]
                if region.users:
                    region.unregistering = True
                else:
                    region.close()

    def status(self, name: str = "") -> list[dict[str, Any]]:
        with self._lock:
            if not name:
                return [r.status() for r in self._regions.values()]
            region = self._regions.get(name)
            if region is None:
                raise NotFound(f"Unable to find system shared memory region: '{name}'")
            return [region.status()]

    def acquire(self, name: str) -> Region:
        self.check_allowed()
        with self._lock:
            region = self._regions.get(name)
            if region is None:
                raise NotFound(f"Unable to find shared memory region: '{name}'")
            region.users += 1
            return region

    def release(self, region: Region) -> None:
        with self._lock:
            region.users -= 1
            if region.users == 0 and region.unregistering:
                region.close()

    def close(self) -> None:
        """Unmap every region (server shutdown)."""
        with self._lock:
            regions, self._regions = list(self._regions.values()), {}
            for region in regions:
                if region.users:
                    region.unregistering = True  # a request outlived the exit timeout: its release closes it
                else:
                    region.close()

    def __len__(self) -> int:
        return len(self._regions)
