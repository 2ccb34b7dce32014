"""The PyTorch backend's config parameters, under Triton's names (pytorch_backend src/pt/model_state.cc).

Every value is a string: booleans "true"/"false" (also 1/0, on/off, yes/no), thread counts integers. A bad value
fails the load naming the parameter. The JIT switches (ENABLE_JIT_EXECUTOR, ENABLE_JIT_PROFILING,
ENABLE_TENSOR_FUSER) are torch-global: as in Triton, a model that sets one sets it before each of its executions,
and a model that does not leaves it as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modelhost.backends.params import bool_param, int_param, param, warn_removed

# Parameters Triton's backend no longer reads: accepted, with a warning, and ignored.
REMOVED = {
    "ENABLE_NVFUSER": "NVFuser was removed from PyTorch (Triton dropped the parameter in Dec 2023); ignored",
}


@dataclass(frozen=True, slots=True)
class TorchSettings:
    optimized_execution: bool = True  # not DISABLE_OPTIMIZED_EXECUTION
    inference_mode: bool = True  # INFERENCE_MODE
    cudnn: bool = True  # not DISABLE_CUDNN
    weight_sharing: bool = False  # ENABLE_WEIGHT_SHARING
    cache_cleaning: bool = False  # ENABLE_CACHE_CLEANING (GPU only)
    # INTRA_OP_THREAD_COUNT / INTER_OP_THREAD_COUNT; None: not set (0 or less, as Triton ignores those)
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None
    # ENABLE_JIT_EXECUTOR / ENABLE_JIT_PROFILING / ENABLE_TENSOR_FUSER; None: leave torch's setting alone
    jit_executor: bool | None = None
    jit_profiling: bool | None = None
    tensor_fuser: bool | None = None


def _switch(config: Any, key: str) -> bool | None:
    raw = param(config, key)
    if raw is None or raw.strip() == "":
        return None
    return bool_param(config, key, True)


def _threads(config: Any, key: str) -> int | None:
    # Triton applies only counts above 0: 0 and -1 mean "the runtime's default".
    value = int_param(config, key, minimum=-(2**31))
    return value if value is not None and value > 0 else None


def read_settings(config: Any, *, aoti: bool = False, warn: bool = True) -> TorchSettings:
    """The model's settings; `warn`: log what is ignored (once per load, not once per instance)."""
    if warn:
        warn_removed(config, REMOVED, "pytorch")
    cache_cleaning = bool_param(config, "ENABLE_CACHE_CLEANING", False)
    if aoti:
        # Triton's torch_aoti path spells it CACHE_CLEANING_ENABLED (src/pt2/model_state.cc): take both.
        cache_cleaning = bool_param(config, "CACHE_CLEANING_ENABLED", cache_cleaning)
    return TorchSettings(
        optimized_execution=not bool_param(config, "DISABLE_OPTIMIZED_EXECUTION", False),
        inference_mode=bool_param(config, "INFERENCE_MODE", True),
        cudnn=not bool_param(config, "DISABLE_CUDNN", False),
        weight_sharing=bool_param(config, "ENABLE_WEIGHT_SHARING", False),
        cache_cleaning=cache_cleaning,
        intra_op_threads=_threads(config, "INTRA_OP_THREAD_COUNT"),
        inter_op_threads=_threads(config, "INTER_OP_THREAD_COUNT"),
        jit_executor=_switch(config, "ENABLE_JIT_EXECUTOR"),
        jit_profiling=_switch(config, "ENABLE_JIT_PROFILING"),
        tensor_fuser=_switch(config, "ENABLE_TENSOR_FUSER"),
    )


__all__ = ["REMOVED", "TorchSettings", "read_settings"]
