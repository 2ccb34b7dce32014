"""TensorRT backend: serves `platform: "tensorrt_plan"` models (`model.plan`) on KIND_GPU instances.

This module binds the plain-Python loader (loader.py) to the real runtime (adapter.py). Importing it imports
`tensorrt`: without the package the registry reports the model UNAVAILABLE with the pip command to run, for
loads and auto-complete alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from modelhost.backends.api import BackendContext
from modelhost.backends.tensorrt import adapter
from modelhost.backends.tensorrt.instance import TensorRTInstance
from modelhost.backends.tensorrt.loader import EngineCache, autocomplete_plan, load_instance


class TensorRTBackend:
    name = "tensorrt"

    def __init__(self) -> None:
        self._engines = EngineCache()

    @staticmethod
    def autocomplete(
        config: Any, model_dir: Path, *, default_max_batch_size: int, settings: Mapping[str, str]
    ) -> None:
        """Inputs, outputs, max_batch_size and dynamic batching from the engine (Triton does not use
        default-max-batch-size for TensorRT: the engine's profiles decide)."""
        autocomplete_plan(config, model_dir, adapter.RUNTIME)

    def load_instance(self, ctx: BackendContext, group: Any, index: int, device_id: int) -> TensorRTInstance:
        return load_instance(ctx, group, index, device_id, adapter.RUNTIME, self._engines)


__all__ = ["TensorRTBackend"]
