"""Client shared memory (Triton's `system_shared_memory` and `cuda_shared_memory` extensions): the regions, their
mappings, bounds.

System shared memory: a client creates a POSIX shared-memory object (`/dev/shm/<key>`), registers a window of it
(offset, byte size) under a name, and then names that region in inference requests: inputs are read from it (a
read-only numpy view over the mapping, no copy), outputs are written into it. Messages follow Triton's
(shared_memory_manager.cc).

Safety: the object's descriptor stays open while the region is registered, and its current size is checked
against every access (fstat), so a client that shrinks the object gets an error instead of a SIGBUS in the
server; an object the client unlinks stays mapped until the region is unregistered. (A shrink that races an
access already checked, or an input view a model still reads after the check, is not covered: POSIX offers no
way to fault-proof a shared mapping.) A region that a request is using cannot be unregistered (`RegionInUse`,
Triton's words); unregistering all regions unregisters those not in use and names the others in its error.

CUDA shared memory: a client allocates device memory, exports it with cudaIpcGetMemHandle and registers the raw
handle under a name; the server opens the handle once (`CudaIpc.open`, which maps the client's whole allocation)
and closes it when the region is unregistered. Inputs named in such a region are copied from the device into a
new host buffer, outputs from the host into the device memory (`CudaRegion.view` / `write`): modelhost's
backends take host arrays, and a copy of the bytes of one request costs microseconds against the IPC open that
is done once. System and CUDA regions share one namespace of names, as in Triton.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import mmap
import os
import stat
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from modelhost.errors import AlreadyExists, ErrorKind, InvalidArgument, ModelhostError, NotFound, Unsupported
from modelhost.host import cuda_runtime
from modelhost.host.devices import gpu_count
from modelhost.tensor_codec import array_from_raw, raw_bytes
from modelhost.types import InferenceRequest, InferenceResponse, ShmWindow

log = logging.getLogger("modelhost.shared_memory")

# Triton's kTritonSharedMemoryRegionPrefix: the python backend's own regions; no client key may start with it.
RESERVED_PREFIX = "triton_python_backend_shm_region_"
DISABLED = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
CUDA_NO_GPU = "CUDA shared memory requires a GPU, and this server has none"
CUDA_NO_BINDINGS = (
    "CUDA shared memory needs the Python package 'cuda-bindings' (NVIDIA's CUDA runtime bindings), which is not "
    "installed on this server; install it with: pip install 'modelhost[cuda]'"
)
SYSTEM = "system"
CUDA = "cuda"
_KIND_WORDS = {SYSTEM: "system", CUDA: "CUDA"}
SHM_DIR = "/dev/shm"
_SIZE_MAX = 2**64 - 1


class RegionInUse(ModelhostError):
    """An unregister of a region that a request is using (from its decoding until its answer is written), in
    Triton's words. Triton answers 500 / INTERNAL; it is no fault of the server but a conflict with the region's
    current use, which the client can retry once its requests are done: 409 / FAILED_PRECONDITION."""

    kind = ErrorKind.CONFLICT


def _check_window(name: str, size: int, offset: int, byte_size: int) -> None:
    """[offset, offset + byte_size) must lie in a region of `size` bytes: Triton's checks and words."""
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
        _check_window(self.name, self.byte_size, offset, byte_size)
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
        _check_window(self.name, self.byte_size, offset, byte_size)

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


AnyRegion = Region | CudaRegion


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
    region: AnyRegion
    offset: int
    byte_size: int


@dataclass(slots=True, eq=False)
class Lease:
    """The regions one inference request uses, held from its decoding until its answer is written."""

    registry: SharedMemoryRegistry
    held: list[AnyRegion] = field(default_factory=list)
    outputs: dict[str, OutputTarget] = field(default_factory=dict)

    def _region(self, name: str) -> AnyRegion:
        for region in self.held:
            if region.name == name:
                return region
        region = self.registry.acquire(name)
        self.held.append(region)
        return region

    def input(self, region: str, offset: int, byte_size: int) -> memoryview:
        """The bytes of an input: a view of a system region, a host copy of a CUDA region."""
        return self._region(region).view(offset, byte_size)

    def output(self, output: str, region: str, offset: int, byte_size: int) -> None:
        """Output `output` goes into the region: checked now, written by `write`."""
        target = self._region(region)
        target.check_window(offset, byte_size)
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

    def read(self, request: InferenceRequest) -> None:
        """Resolve a request's shared-memory refs: each input's data read from its window (a view of a system
        region, a host copy of a CUDA one), each output's window checked for `written`."""
        for tensor in request.inputs:
            window = tensor.shm
            if window is not None:
                view = self.input(window.region, window.offset, window.byte_size)
                tensor.data = array_from_raw(
                    tensor.name, tensor.datatype, tensor.shape, view, request.model_name, request.id
                )
        for output in request.outputs:
            window = output.shm
            if window is not None:
                self.output(output.name, window.region, window.offset, window.byte_size)

    def written(self, response: InferenceResponse) -> InferenceResponse:
        """The response with each output requested in shared memory written into its window and marked so
        (copies: a cached response is shared)."""
        if not self.outputs or response.error is not None:
            return response
        outputs = []
        for tensor in response.outputs:
            if self.write(tensor.name, tensor.datatype, tensor.data):
                target = self.outputs[tensor.name]
                window = ShmWindow(target.region.name, target.offset, target.byte_size)
                tensor = dataclasses.replace(tensor, shm=window)
            outputs.append(tensor)
        return dataclasses.replace(response, outputs=outputs)

    def release(self) -> None:
        held, self.held = self.held, []
        self.outputs.clear()
        for region in held:
            self.registry.release(region)


class SharedMemoryRegistry:
    """The registered shared-memory regions of a server, system and CUDA, by name (one namespace for both).

    `cuda_ipc`: how CUDA regions reach device memory; None: through the CUDA runtime where this host has a GPU and
    the cuda-bindings package, else CUDA registration is refused (501) with the reason."""

    def __init__(
        self,
        *,
        allowed: bool = False,
        reserved_prefixes: tuple[str, ...] = (RESERVED_PREFIX,),
        cuda_ipc: CudaIpc | None = None,
    ) -> None:
        self.allowed = allowed
        self.reserved_prefixes = reserved_prefixes
        self._cuda_ipc = cuda_ipc
        self._cuda_reason: str | None = None
        self._opening: set[str] = set()  # CUDA regions whose handle is being opened: their names are taken
        self._regions: dict[str, AnyRegion] = {}
        self._lock = threading.Lock()

    def check_allowed(self) -> None:
        if not self.allowed:
            raise Unsupported(DISABLED)

    def cuda_ipc(self) -> CudaIpc:
        """What opens CUDA IPC handles here, or Unsupported saying why nothing can."""
        if self._cuda_ipc is None:
            if self._cuda_reason is None:
                self._cuda_reason = cuda_unavailable() or ""  # the host does not change: found out once
            if self._cuda_reason:
                raise Unsupported(self._cuda_reason)
            self._cuda_ipc = RUNTIME_IPC
        return self._cuda_ipc

    def cuda_available(self) -> bool:
        """Whether CUDA regions can be registered (the cuda_shared_memory extension is served)."""
        try:
            self.cuda_ipc()
        except Unsupported:
            return False
        return True

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
            if name in self._regions or name in self._opening:
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

    def register_cuda(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        """Register the device memory of a client's CUDA IPC handle (the 64 bytes of a cudaIpcMemHandle_t)."""
        self.check_allowed()
        ipc = self.cuda_ipc()
        if not name:
            raise InvalidArgument("'region name' is necessary to register cuda shared memory region")
        if len(raw_handle) != cuda_runtime.IPC_HANDLE_SIZE:
            raise InvalidArgument(
                f"'raw_handle' must be a cudaIpcMemHandle_t of {cuda_runtime.IPC_HANDLE_SIZE} bytes, not "
                f"{len(raw_handle)} bytes"
            )
        if not 0 <= device_id < 2**31 or byte_size < 0:
            raise InvalidArgument(f"failed to register shared memory region '{name}': invalid args")
        with self._lock:
            if name in self._regions or name in self._opening:
                raise AlreadyExists(f"shared memory region '{name}' already in manager")
            # The name is taken while the handle opens, outside the lock: the first open creates the CUDA
            # context (hundreds of ms), and requests acquiring other regions must not wait for it.
            self._opening.add(name)
        try:
            region = self._open_cuda(ipc, name, raw_handle, device_id, byte_size)
            with self._lock:
                self._regions[name] = region
        finally:
            with self._lock:
                self._opening.discard(name)

    @staticmethod
    def _open_cuda(ipc: CudaIpc, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> CudaRegion:
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

    def unregister(self, name: str = "", kind: str = SYSTEM) -> None:
        """Unregister one region of `kind` ("" = all of them). An unknown name, or the name of a region of the
        other kind, is no error, as in Triton. A region that a request is using stays registered: RegionInUse
        (for all regions: the others are unregistered, and the error names those in use, in name order)."""
        self.check_allowed()
        with self._lock:
            if name:
                region = self._regions.get(name)
                if region is None or region.kind != kind:
                    return
                if region.users:
                    raise RegionInUse(
                        f"Cannot unregister shared memory region '{name}', it is currently in use."
                    )
                del self._regions[name]
                region.close()
                return
            in_use: list[str] = []
            for n in sorted(self._regions):  # Triton's regions are a std::map: in name order
                region = self._regions[n]
                if region.kind != kind:
                    continue
                if region.users:
                    in_use.append(n)
                    continue
                del self._regions[n]
                region.close()
        if in_use:
            # Triton's words, its " ," after each name included.
            words = "system" if kind == SYSTEM else "cuda"
            raise RegionInUse(
                f"Failed to unregister the following {words} shared memory regions: "
                + "".join(f"{n} ," for n in in_use)
            )

    def status(self, name: str = "", kind: str = SYSTEM) -> list[dict[str, Any]]:
        """The regions of `kind`, or the one named."""
        with self._lock:
            if not name:
                return [r.status() for r in self._regions.values() if r.kind == kind]
            region = self._regions.get(name)
            if region is None:
                raise NotFound(f"Unable to find {kind} shared memory region: '{name}'")
            if region.kind != kind:
                raise NotFound(
                    f"The region named '{name}' is registered as {_KIND_WORDS[region.kind]} shared memory, "
                    f"not {_KIND_WORDS[kind]} shared memory"
                )
            return [region.status()]

    def acquire(self, name: str) -> AnyRegion:
        self.check_allowed()
        with self._lock:
            region = self._regions.get(name)
            if region is None:
                raise NotFound(f"Unable to find shared memory region: '{name}'")
            region.users += 1
            return region

    def release(self, region: AnyRegion) -> None:
        with self._lock:
            region.users -= 1
            if region.users == 0 and region.unregistering:  # unregistered at shutdown while in use
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
