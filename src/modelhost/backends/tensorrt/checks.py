"""Checking a TensorRT model's config against its engine at load (tensorrt_backend ValidateIO and the input
binding checks), so that a contradicting config leaves the model UNAVAILABLE instead of failing every request.

Checked: names, datatypes and dims of the config's tensors (backends/model_io.py, with Triton's rule that the
batch dimension is a wildcard against the engine's first dimension), shape-tensor and IO-format markings, every
engine input being fed, and each config input's fixed dims against the min/max of every profile the instance
uses. Refused as not supported by modelhost: engines with shape-tensor inputs or outputs, non-linear IO formats,
or I/O datatypes Triton has no name for (FP8, INT4, FP4).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from modelhost.backends.model_io import TensorInfo, check_io, config_shape
from modelhost.backends.tensorrt.engine import EngineDescription, EngineTensor
from modelhost.backends.tensorrt.profiles import dimension_error, profile_max_batch
from modelhost.errors import ModelConfigError

log = logging.getLogger(__name__)


def _refuse_unsupported(model_name: str, engine: EngineDescription) -> None:
    for tensor in engine.tensors:
        kind = "input" if tensor.is_input else "output"
        if tensor.config_type is None:
            raise ModelConfigError(
                f"unable to load model '{model_name}': engine {kind} '{tensor.name}' has TensorRT datatype "
                f"{tensor.trt_type}, which has no model config datatype"
            )
        if tensor.is_shape_tensor:
            raise ModelConfigError(
                f"unable to load model '{model_name}': engine {kind} '{tensor.name}' is a shape tensor, which "
                "modelhost's TensorRT backend does not support; rebuild the engine without shape-tensor I/O"
            )
        if not tensor.linear_format:
            raise ModelConfigError(
                f"unable to load model '{model_name}': engine {kind} '{tensor.name}' uses a non-linear IO "
                "format, which modelhost's TensorRT backend does not support; rebuild the engine with linear "
                "(default) I/O formats"
            )


def _check_markings(model_name: str, config: Any, engine: EngineDescription) -> None:
    """Triton's ValidateIOHelper: the config may not call a plain tensor a shape tensor or non-linear."""
    for kind, ios in (("input", config.input), ("output", config.output)):
        for io in ios:
            tensor = engine.tensor(io.name)
            if tensor is None:
                continue  # check_io names it
            if io.is_shape_tensor and not tensor.is_shape_tensor:
                raise ModelConfigError(
                    f"{kind} '{io.name}' for model '{model_name}' is incorrectly marked as a shape tensor in "
                    "the model configuration."
                )
            if io.is_non_linear_format_io and tensor.linear_format:
                raise ModelConfigError(
                    f"{kind} '{io.name}' for model '{model_name}' uses a linear IO format, but "
                    "'is_non_linear_format_io' is incorrectly set to true in the model configuration."
                )


def _tensor_info(tensor: EngineTensor, batching: bool) -> TensorInfo:
    # Triton's CompareDimsSupported puts a wildcard batch dimension in front of the config's dims, so an engine
    # with a fixed first dimension (a static engine built for batch 8) still serves a batching config.
    dims = tensor.shape
    if batching and dims:
        dims = (-1, *dims[1:])
    return TensorInfo(tensor.name, tensor.config_type, dims)


def _check_profiles(
    model_name: str, config: Any, engine: EngineDescription, profiles: Sequence[int], fed: Iterable[str]
) -> None:
    """Each config input's shape (batch dimension a wildcard) must fit every profile the instance uses
    (tensorrt_backend ConfigureInputDimensions); warn where max_batch_size exceeds a profile's max batch."""
    batching = config.max_batch_size > 0
    skipped = set(fed)
    for io in config.input:
        tensor = engine.tensor(io.name)
        if tensor is None or io.name in skipped or getattr(io, "allow_ragged_batch", False):
            continue
        full = [-1, *config_shape(io)] if batching else config_shape(io)
        for profile in profiles:
            low = tensor.profiles[profile].min if profile < len(tensor.profiles) else tensor.shape
            if len(full) != len(low):
                continue  # check_io has refused a rank that differs
            # A -1 in the config accepts whatever the profile accepts: check only its fixed dims.
            fixed = [d if d != -1 else lo for d, lo in zip(full, low, strict=True)]
            error = dimension_error(fixed, tensor, profile)
            if error is not None:
                raise ModelConfigError(
                    f"model configuration specified invalid shape for input '{io.name}' for model "
                    f"{model_name}. Error details: {error}"
                )
    if batching:
        for profile in profiles:
            largest = profile_max_batch(engine, profile)
            if config.max_batch_size > largest:
                log.warning(
                    "model '%s': max_batch_size %d exceeds the largest batch (%d) of optimization profile %d; "
                    "larger batches on that profile are refused",
                    model_name,
                    config.max_batch_size,
                    largest,
                    profile,
                )


def check_config_against_engine(
    model_name: str,
    config: Any,
    engine: EngineDescription,
    profiles: Sequence[int],
    fed_by_server: Iterable[str],
) -> None:
    """Raise ModelConfigError naming the first thing the config says that the engine contradicts."""
    fed = set(fed_by_server)
    _refuse_unsupported(model_name, engine)
    if len(config.input) > len(engine.inputs):
        raise ModelConfigError(
            f"unable to load model '{model_name}', configuration expects {len(config.input)} inputs, model "
            f"provides at most {len(engine.inputs)}"
        )
    _check_markings(model_name, config, engine)
    batching = config.max_batch_size > 0
    check_io(
        model_name,
        config,
        {t.name: _tensor_info(t, batching) for t in engine.inputs},
        {t.name: _tensor_info(t, batching) for t in engine.outputs},
        fed_by_server=fed,
    )
    _check_profiles(model_name, config, engine, profiles, fed)


__all__ = ["check_config_against_engine"]
