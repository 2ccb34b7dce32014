"""Client shared memory (Triton's `system_shared_memory` and `cuda_shared_memory` extensions): the registry of a
server's regions, by name.

A client registers a window of its shared memory under a name and then names that region in inference requests.
System regions (shm_system.py) are windows of POSIX shared-memory objects, mapped here; CUDA regions (shm_cuda.py)
are device memory shared through a CUDA IPC handle. System and CUDA regions share one namespace of names, as in
Triton. A request's refs are resolved by a `Lease` (shm_lease.py), which holds the regions it uses until its answer
is written: a region that a request is using cannot be unregistered (`RegionInUse`, Triton's words);
unregistering all regions unregisters those not in use and names the others in its error. Messages follow
Triton's (shared_memory_manager.cc).
"""

from __future__ import annotations

import threading
from typing import Any

from modelhost.engine.shm_cuda import (
    CUDA,
    RUNTIME_IPC,
    CudaIpc,
    CudaRegion,
    cuda_unavailable,
    open_cuda_region,
)
from modelhost.engine.shm_system import SYSTEM, Region, open_region
from modelhost.errors import AlreadyExists, ErrorKind, InvalidArgument, ModelhostError, NotFound, Unsupported
from modelhost.host import cuda_runtime

# Triton's kTritonSharedMemoryRegionPrefix: the python backend's own regions; no client key may start with it.
RESERVED_PREFIX = "triton_python_backend_shm_region_"
DISABLED = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
_KIND_WORDS = {SYSTEM: "system", CUDA: "CUDA"}


class RegionInUse(ModelhostError):
    """An unregister of a region that a request is using (from its decoding until its answer is written), in
    Triton's words. Triton answers 500 / INTERNAL; it is no fault of the server but a conflict with the region's
    current use, which the client can retry once its requests are done: 409 / FAILED_PRECONDITION."""

    kind = ErrorKind.CONFLICT


AnyRegion = Region | CudaRegion


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
            self._regions[name] = open_region(name, key, offset, byte_size)

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
            region = open_cuda_region(ipc, name, raw_handle, device_id, byte_size)
            with self._lock:
                self._regions[name] = region
        finally:
            with self._lock:
                self._opening.discard(name)

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
