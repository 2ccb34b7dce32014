"""The backend seam: `load` builds one instance of a model version; an instance executes batches.

An instance is owned by exactly one worker thread at a time (see scheduling/instances.py), so implementations
need no locking of their own. `execute` is called off the event loop and may block.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy.typing as npt

from modelhost.gpu_memory import GpuMemory
from modelhost.python_backend.custom_metrics import CustomMetrics

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


# A backend may also define the auto-complete hook that backends/registry.py `autocomplete` calls when
# auto-complete is on (`--disable-auto-complete-config` not given):
#
#     @staticmethod
#     def autocomplete(config: ModelConfig, model_dir: Path, *, default_max_batch_size: int) -> None:
#         """Fill in what the config leaves out from the model itself, in place."""
