"""The backend contract: what every backend implements and what the server gives it.

A backend is a class named in backends/registry.py, imported only when a model needs it. The server calls:

- `autocomplete(config, model_dir, *, default_max_batch_size, settings)` (optional, a static method) at config
  time when auto-complete is on: fill in, in place, what the config leaves out, from the model file itself
  (`settings`: the backend's --backend-config settings, as its instances get them);
- `load_instance(ctx, group, index, device_id)` once per instance of a model version: load the model for that
  instance's device, check that the config agrees with the model (backends/model_io.py) and raise
  ModelConfigError naming the field where it does not, so that a contradicting config never becomes READY;
- `instance.execute(inputs, output_names)` per batch, off the event loop, by one worker thread at a time
  (scheduling/instances.py), so instances need no locking of their own; a fault there fails the requests of
  that batch only, and is counted as failure reason BACKEND;
- `instance.close()` at unload: release the model's memory (host and device).

Memory needs are measured, not declared (model_memory.py): the server samples the process tree and the GPUs
around each load. Device needs are the instance group's: `group.kind` and `device_id` say where an instance
runs, and a backend refuses a kind it cannot serve in `load_instance` with the reason.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy.typing as npt

from modelhost.custom_metrics import CustomMetrics
from modelhost.gpu_memory import GpuMemory

if TYPE_CHECKING:
    from modelhost.scheduling.instances import RequestLevelInstance

Arrays = dict[str, npt.NDArray[Any]]


@dataclass(slots=True)
class BackendServices:
    """What a backend may use of the running server: its event loop, and the server itself for models that
    call other models (python BLS) or manage them. Filled in once the server exists; empty in unit tests."""

    loop: asyncio.AbstractEventLoop | None = None
    server: Any = None  # modelhost.server.Server (not imported: the server imports the backends)
    custom_metrics: CustomMetrics = field(default_factory=CustomMetrics)


@dataclass(frozen=True, slots=True)
class BackendContext:
    model_name: str
    version: int
    model_dir: Path
    version_dir: Path
    config: Any  # ModelConfig
    # --backend-config settings for this backend, merged over the global ones.
    backend_config: dict[str, str] = field(default_factory=dict)
    # How many instances of this model version will run side by side (for thread budgets).
    total_instances: int = 1
    gpu_count: int = 0
    # --cuda-memory-pool-byte-size and --model-load-gpu-limit, for KIND_GPU instances.
    gpu_memory: GpuMemory = field(default_factory=GpuMemory)
    services: BackendServices = field(default_factory=BackendServices)


class ModelInstance(Protocol):
    name: str

    def execute(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        """Run the model on model-shaped inputs; return the requested outputs, model-shaped."""
        ...

    def close(self) -> None: ...


class Backend(Protocol):
    name: str

    def load_instance(
        self, ctx: BackendContext, group: Any, index: int, device_id: int
    ) -> ModelInstance | RequestLevelInstance:
        """Build one instance of `group` (an instance_group entry); raise ModelhostError with a clear reason."""
        ...


# A backend whose instances may be built at the same time (each its own process or session) says so with
# `parallel_instances = True`: a model's instances are then built on threads of their own, as Triton builds them
# for the backends that declare parallel instance loading.
#
# A backend may also define the auto-complete hook that backends/registry.py `autocomplete` calls when
# auto-complete is on (`--disable-auto-complete-config` not given):
#
#     @staticmethod
#     def autocomplete(
#         config: ModelConfig, model_dir: Path, *, default_max_batch_size: int, settings: Mapping[str, str]
#     ) -> None:
#         """Fill in what the config leaves out from the model itself, in place."""
