"""Where a FIL instance predicts: KIND_GPU instances on the GPU where a library can, else on CPU.

Triton's FIL runs every model type on GPU through its own CUDA kernels. modelhost predicts with the frameworks'
own predictors, and of those only XGBoost's runs on GPU (`device="cuda:N"`, in an XGBoost build with CUDA:
the `xgboost` package, not `xgboost-cpu`). A KIND_GPU instance of another model type, or without such a build,
predicts on CPU with a warning, so that configs written for Triton (KIND_AUTO becomes KIND_GPU on a GPU host)
still load. Without any GPU, KIND_GPU is refused, as Triton refuses it.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from modelhost.backends.params import group_kind
from modelhost.errors import ModelConfigError

log = logging.getLogger(__name__)

_GPU_TYPES = ("xgboost_json", "xgboost_ubj")


def _xgboost_has_cuda() -> bool:
    try:
        xgboost = importlib.import_module("xgboost")
    except ModuleNotFoundError:
        return False
    return bool(xgboost.build_info().get("USE_CUDA", False))


def gpu_device(model_name: str, group: Any, device_id: int, gpu_count: int, model_type: str) -> str | None:
    """ "cuda:N" for an instance that predicts on GPU N, None for one that predicts on CPU."""
    if group_kind(group) != "KIND_GPU":
        return None
    if gpu_count == 0:
        raise ModelConfigError(
            f"unable to load model '{model_name}': instance group kind KIND_GPU needs a GPU, and none is visible"
        )
    if model_type in _GPU_TYPES and _xgboost_has_cuda():
        return f"cuda:{device_id}"
    why = (
        "this XGBoost build has no CUDA (install the 'xgboost' package instead of 'xgboost-cpu')"
        if model_type in _GPU_TYPES
        else f"modelhost has no GPU predictor for model_type '{model_type}'"
    )
    log.warning("model '%s': KIND_GPU instance on GPU %d predicts on CPU: %s", model_name, device_id, why)
    return None


__all__ = ["gpu_device"]
