"""The PyTorch backend: what the registry loads for `backend: "pytorch"`.

It reads the model's parameters, places the instance (placement.py), applies the thread counts (threads.py) and
hands over to the TorchScript or the AOTInductor loader by platform. Auto-complete is not supported, as in Triton:
neither format records its tensors' dtypes and shapes, so nothing could be filled in without guessing; the hook
only warns, with Triton's words.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from modelhost.backends.api import BackendContext
from modelhost.backends.cpu_threads import default_intra_op_threads
from modelhost.backends.pytorch.aoti import AotiInstance, load_aoti
from modelhost.backends.pytorch.placement import placement
from modelhost.backends.pytorch.settings import read_settings
from modelhost.backends.pytorch.threads import PROCESS_THREADS
from modelhost.backends.pytorch.torchscript import TorchScriptInstance, load_torchscript
from modelhost.errors import ModelConfigError
from modelhost.host.gpu_memory import check_load_limit

log = logging.getLogger(__name__)

AOTI_PLATFORM = "torch_aoti"


def _first_instance(ctx: BackendContext, group: Any, index: int) -> bool:
    """Whether this is the first instance of the load: what is said once per load is said then."""
    groups = list(ctx.config.instance_group)
    return index == 0 and (not groups or group is groups[0] or group == groups[0])


class PyTorchBackend:
    name = "pytorch"

    @staticmethod
    def autocomplete(
        config: Any, model_dir: Path, *, default_max_batch_size: int, settings: Mapping[str, str]
    ) -> None:
        log.warning(
            "skipping model configuration auto-complete for '%s': not supported for pytorch backend",
            config.name or model_dir.name,
        )

    def load_instance(
        self, ctx: BackendContext, group: Any, index: int, device_id: int
    ) -> TorchScriptInstance | AotiInstance:
        model, config = ctx.model_name, ctx.config
        if config.runtime == "model.py":
            raise ModelConfigError(
                f"unable to load model '{model}': the PyTorch 2 python runtime (runtime: \"model.py\") is not "
                'supported; serve a TorchScript model.pt (platform "pytorch_libtorch") or an AOTInductor model.pt2 '
                '(platform "torch_aoti")'
            )
        first = _first_instance(ctx, group, index)
        aoti = config.platform == AOTI_PLATFORM
        settings = read_settings(config, aoti=aoti, warn=first)
        where = placement(model, group, device_id)
        PROCESS_THREADS.claim(model, settings)
        budget = default_intra_op_threads(ctx.total_instances)
        if first and settings.intra_op_threads is None and PROCESS_THREADS.intra is None:
            log.debug(
                "model '%s': %d instance(s), %d intra-op thread(s) each (INTRA_OP_THREAD_COUNT not set)",
                model,
                ctx.total_instances,
                budget,
            )
        name = f"{group.name}_{index}"
        load = load_aoti if aoti else load_torchscript
        instance = load(ctx, name, settings, where, budget, first)
        if where.kind == "KIND_GPU":
            try:
                # After the model is on the GPU, as tritonserver checks: its own memory counts against the limit.
                check_load_limit(ctx.gpu_memory, name, device_id)
            except BaseException:
                instance.close()
                raise
        return instance


__all__ = ["PyTorchBackend"]
