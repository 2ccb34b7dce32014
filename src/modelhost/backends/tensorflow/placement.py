"""Where an instance runs: the TensorFlow device of its instance group, and the execution accelerators.

KIND_CPU instances run on "/CPU:0" (a GPU build would otherwise place ops on a GPU), KIND_GPU ones on
"/GPU:<id>" where the installed TensorFlow can use GPUs, KIND_MODEL ones wherever the model places its ops. The
GPU execution accelerators of Triton's TF backend (TF-TRT, automatic mixed precision, GPU I/O) are not
implemented: one is ignored with a warning (as Triton ignores them on CPU instances); a CPU accelerator is
refused, as in Triton.
"""

from __future__ import annotations

import logging
from typing import Any

from modelhost.backends.api import BackendContext
from modelhost.backends.params import group_kind
from modelhost.backends.tensorflow import runtime
from modelhost.errors import ModelConfigError

log = logging.getLogger(__name__)


def device_for(ctx: BackendContext, group: Any, device_id: int) -> str | None:
    """The TensorFlow device of an instance of `group` (None: TensorFlow's own placement), or ModelConfigError."""
    accelerators = ctx.config.optimization.execution_accelerators
    if len(accelerators.cpu_execution_accelerator) > 0:
        raise ModelConfigError(
            f"unable to load model '{ctx.model_name}': CPU Execution Accelerator is not supported in TensorFlow "
            "backend"
        )
    kind = group_kind(group)
    if kind == "KIND_GPU":
        if ctx.gpu_count == 0:
            raise ModelConfigError(
                f"unable to load model '{ctx.model_name}': instance group kind KIND_GPU needs a GPU, and none is "
                "visible"
            )
        if runtime.gpu_count() == 0:
            raise ModelConfigError(
                f"unable to load model '{ctx.model_name}': instance group kind KIND_GPU needs a TensorFlow build "
                "with GPU support, and the installed one sees no GPU (tensorflow-cpu); use KIND_CPU, or install "
                "a GPU build (pip install 'tensorflow[and-cuda]')"
            )
        if len(accelerators.gpu_execution_accelerator) > 0:
            log.warning(
                "model '%s': GPU execution accelerators are not supported by the tensorflow backend and are ignored",
                ctx.model_name,
            )
        return f"/GPU:{device_id}"
    if len(accelerators.gpu_execution_accelerator) > 0:
        log.warning(
            "model '%s': GPU Execution Accelerator will be ignored for model instance on CPU", ctx.model_name
        )
    return "/CPU:0" if kind == "KIND_CPU" else None


__all__ = ["device_for"]
