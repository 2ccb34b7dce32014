"""The TensorRT settings of a model: its config parameters and `--backend-config=tensorrt,<key>=<value>`.

Honoured (as in Triton's tensorrt_backend):
- parameter `execution_context_allocation_strategy`: STATIC (default) or ON_PROFILE_CHANGE, exact spelling;
- `optimization.priority`: PRIORITY_MAX / PRIORITY_MIN give the instance's CUDA stream that priority;
- backend-config `version-compatible` (load version-compatible plans, whose lean runtime then runs inside the
  server: trust the plan) and `plugins` (`;`-separated plugin libraries, loaded once per process).

Accepted and ignored, each said once per load where set: backend-config `execution-policy` and
`coalesce-request-input` (modelhost's scheduler runs one batch per instance at a time, which is BLOCKING, and
gathers request inputs itself); `optimization.cuda` (graphs, graph_spec, busy_wait_events, output_copy_stream),
`optimization.gather_kernel_buffer_threshold` and `optimization.eager_batching` (Triton's own input and output
copy machinery). Refused: parameter `enable_multi_device` true (TensorRT Multi-Device).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from modelhost.backends.params import param
from modelhost.errors import ModelConfigError

log = logging.getLogger(__name__)

ALLOCATION_STRATEGIES = ("STATIC", "ON_PROFILE_CHANGE")
# The --backend-config keys of Triton's tensorrt_backend; modelhost honours the first two.
BACKEND_CONFIG_KEYS = ("version-compatible", "plugins", "execution-policy", "coalesce-request-input")
_TRUE = ("true", "1", "on", "yes")
_FALSE = ("false", "0", "off", "no")


@dataclass(frozen=True, slots=True)
class TensorRTSettings:
    allocation_strategy: str = "STATIC"
    priority: str = "DEFAULT"  # DEFAULT, MAX or MIN: the CUDA stream priority of each instance
    version_compatible: bool = False
    plugins: tuple[str, ...] = ()


def _bool_setting(key: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ModelConfigError(f"--backend-config tensorrt,{key} must be 'true' or 'false', got '{value}'")


def backend_settings(backend_config: Mapping[str, str]) -> tuple[bool, tuple[str, ...]]:
    """(version-compatible, plugin paths) from --backend-config=tensorrt,..."""
    version_compatible = _bool_setting(
        "version-compatible", backend_config.get("version-compatible", "false") or "false"
    )
    plugins = tuple(p.strip() for p in backend_config.get("plugins", "").split(";") if p.strip())
    policy = backend_config.get("execution-policy")
    if policy is not None and policy not in ("DEVICE_BLOCKING", "BLOCKING"):
        raise ModelConfigError(
            f"--backend-config tensorrt,execution-policy must be DEVICE_BLOCKING or BLOCKING, got '{policy}'"
        )
    coalesce = backend_config.get("coalesce-request-input")
    if coalesce is not None:
        _bool_setting("coalesce-request-input", coalesce)
    return version_compatible, plugins


def _allocation_strategy(config: Any, model_name: str) -> str:
    value = param(config, "execution_context_allocation_strategy")
    if value is None:
        return "STATIC"
    if value not in ALLOCATION_STRATEGIES:
        raise ModelConfigError(
            f"Invalid value for 'execution_context_allocation_strategy': '{value}' for model instance "
            f"'{model_name}'. Supported values are 'STATIC' and 'ON_PROFILE_CHANGE'."
        )
    return value


def _priority(config: Any) -> str:
    name: str = (
        config.optimization.DESCRIPTOR.fields_by_name["priority"]
        .enum_type.values_by_number[config.optimization.priority]
        .name
    )
    return name.removeprefix("PRIORITY_")


def ignored_fields(config: Any, backend_config: Mapping[str, str]) -> list[str]:
    """The settings this model sets that Triton's TensorRT backend reads and modelhost does not."""
    ignored = [f"--backend-config tensorrt,{key}" for key in BACKEND_CONFIG_KEYS[2:] if key in backend_config]
    optimization = config.optimization
    cuda = optimization.cuda
    for field, is_set in (
        ("optimization.cuda.graphs", cuda.graphs),
        ("optimization.cuda.graph_spec", bool(cuda.graph_spec)),
        ("optimization.cuda.busy_wait_events", cuda.busy_wait_events),
        ("optimization.cuda.output_copy_stream", cuda.output_copy_stream),
        ("optimization.gather_kernel_buffer_threshold", optimization.gather_kernel_buffer_threshold > 0),
        ("optimization.eager_batching", optimization.eager_batching),
    ):
        if is_set:
            ignored.append(field)
    return ignored


def model_settings(config: Any, backend_config: Mapping[str, str], model_name: str) -> TensorRTSettings:
    """The settings one model's instances load with; a bad value fails the load naming it."""
    multi_device = (param(config, "enable_multi_device") or "").strip().lower()
    if multi_device in ("true", "1"):
        raise ModelConfigError(
            f"unable to load model '{model_name}': TensorRT Multi-Device (parameter 'enable_multi_device') is "
            "not supported by modelhost; serve the engine on one GPU per instance instead"
        )
    version_compatible, plugins = backend_settings(backend_config)
    ignored = ignored_fields(config, backend_config)
    if ignored:
        log.info(
            "model '%s': %s accepted and ignored by modelhost's TensorRT backend",
            model_name,
            ", ".join(ignored),
        )
    return TensorRTSettings(
        allocation_strategy=_allocation_strategy(config, model_name),
        priority=_priority(config),
        version_compatible=version_compatible,
        plugins=plugins,
    )


__all__ = [
    "ALLOCATION_STRATEGIES",
    "BACKEND_CONFIG_KEYS",
    "TensorRTSettings",
    "backend_settings",
    "ignored_fields",
    "model_settings",
]
