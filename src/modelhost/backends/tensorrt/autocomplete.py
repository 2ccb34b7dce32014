"""TensorRT auto-complete from the engine (tensorrt_backend ModelState::AutoCompleteConfigHelper).

It runs whenever auto-complete is on, even for a config that lists its inputs and outputs: those keep what they
say and only get what they leave out (datatype, dims, is_shape_tensor) from the engine. In order:

1. the config's tensors with dims say whether it wants batching: dims one shorter than the engine's rank mean
   a batch dimension, dims of the full rank mean none (a tensor with `allow_ragged_batch` means batching);
2. the engine's max batch: per selected profile (`instance_group.profile`, default 0) the smallest dim 0 of the
   inputs' kMAX shapes, then the largest over the profiles; 0 when the config's dims rule batching out;
3. an unset max_batch_size takes it; a larger one is an error; `dynamic_batching {}` is added when the engine's
   max batch is over 1 and no scheduler is configured;
4. missing inputs/outputs are filled from the engine (batch dimension dropped when batching; a tensor with no
   dimension gets dims [1] and an empty reshape).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from tritonclient.grpc.model_config_pb2 import DataType

from modelhost.backends.batching_fill import fill_dims
from modelhost.backends.tensorrt.engine import EngineDescription, EngineTensor
from modelhost.backends.tensorrt.profiles import engine_max_batch, selected_profiles
from modelhost.errors import ModelConfigError

log = logging.getLogger(__name__)


def _config_shape(io: Any) -> list[int]:
    return list(io.reshape.shape) if io.HasField("reshape") else list(io.dims)


def _check_allowed(kind: str, io: Any, allowed: Sequence[EngineTensor]) -> None:
    names = [t.name for t in allowed]
    if io.name not in names:
        raise ModelConfigError(
            f"unexpected inference {kind} '{io.name}', allowed {kind}s are: {', '.join(names)}"
        )


def _batch_hint(config: Any, engine: EngineDescription, model_name: str) -> tuple[bool, int]:
    """(whether the config's tensors ask for a batch dimension, how many tensors give a shape)."""
    hints: set[bool] = set()
    with_shape = 0
    for kind, ios, allowed in (
        ("input", config.input, engine.inputs),
        ("output", config.output, engine.outputs),
    ):
        for io in ios:
            if getattr(io, "allow_ragged_batch", False):
                hints.add(True)  # a ragged tensor is itself a batching hint
                continue
            shape = _config_shape(io)
            if shape:
                with_shape += 1
            _check_allowed(kind, io, allowed)
            if not shape:
                continue
            tensor = engine.tensor(io.name)
            assert tensor is not None  # _check_allowed
            if tensor.is_shape_tensor:
                hints.add(bool(tensor.shape) and tensor.shape[0] == shape[0] + 1)
            else:
                hints.add(len(tensor.shape) == len(shape) + 1)
    if len(hints) > 1:
        raise ModelConfigError(
            f"unable to autofill for '{model_name}', model tensor configurations are contradicting each other "
            "in terms of whether batching is supported"
        )
    return hints == {True}, with_shape


def _set_max_batch_size(config: Any, engine: EngineDescription, model_name: str) -> int:
    """Set or check config.max_batch_size; return the engine's max batch (for the scheduler rule)."""
    hint, with_shape = _batch_hint(config, engine, model_name)
    profiles = selected_profiles(config, engine.num_profiles, model_name)
    max_batch = engine_max_batch(engine, profiles)
    if hint and max_batch == 0:
        raise ModelConfigError(
            f"autofill failed for model '{model_name}': model tensor shape configuration hints for dynamic "
            "batching but the underlying engine doesn't support batching."
        )
    if with_shape and not hint:
        log.warning(
            "The specified dimensions in model config for %s hints that batching is unavailable", model_name
        )
        max_batch = 0
    if config.max_batch_size == 0:
        config.max_batch_size = max_batch
    elif config.max_batch_size > max_batch:
        raise ModelConfigError(
            f"autofill failed for model '{model_name}': configuration specified max-batch "
            f"{config.max_batch_size} but TensorRT engine only supports max-batch {max_batch}"
        )
    return max_batch


def _config_type(tensor: EngineTensor, model_name: str) -> int:
    name = tensor.config_type
    if name is None:
        raise ModelConfigError(
            f"unable to autofill for '{model_name}': engine tensor '{tensor.name}' has TensorRT datatype "
            f"{tensor.trt_type}, which has no model config datatype"
        )
    value: int = DataType.Value(name)
    return value


def _fill_dims(io: Any, tensor: EngineTensor, batching: bool) -> None:
    """Triton's InitIODims: the engine's shape less the batch dimension; [1] plus an empty reshape for a tensor
    with no dimension left; for a shape tensor its length (less one for the batch value when batching)."""
    if tensor.is_shape_tensor:
        if tensor.shape:
            io.dims.append(tensor.shape[0] - 1 if batching else tensor.shape[0])
        return
    fill_dims(io, tensor.shape, batching, reshape_unbatched=True)


def _fill_tensors(ios: Any, tensors: Sequence[EngineTensor], batching: bool, model_name: str) -> None:
    """Triton's FixIO: an empty list takes every engine tensor; listed tensors only get what they leave out."""
    if not ios:
        for reference in tensors:
            io = ios.add(name=reference.name, data_type=_config_type(reference, model_name))
            _fill_dims(io, reference, batching)
            io.is_shape_tensor = reference.is_shape_tensor
            io.is_non_linear_format_io = not reference.linear_format
        return
    by_name = {t.name: t for t in tensors}
    for io in ios:
        tensor = by_name.get(io.name)
        if tensor is None:
            continue
        if io.data_type == DataType.TYPE_INVALID:
            io.data_type = _config_type(tensor, model_name)
        if not io.dims:
            _fill_dims(io, tensor, batching)
        if io.is_shape_tensor and not tensor.is_shape_tensor:
            raise ModelConfigError(f"'{io.name}' is incorrectly specified as a shape tensor.")
        io.is_shape_tensor = tensor.is_shape_tensor
        if io.is_non_linear_format_io and tensor.linear_format:
            raise ModelConfigError(
                f"'{io.name}' uses a linear IO format, but 'is_non_linear_format_io' is incorrectly set to "
                "true in the model configuration."
            )
        io.is_non_linear_format_io = not tensor.linear_format


def autocomplete_from_engine(config: Any, engine: EngineDescription, model_name: str) -> None:
    """Complete a TensorRT model's config in place from its engine's description."""
    max_batch = _set_max_batch_size(config, engine, model_name)
    if max_batch > 1 and not config.HasField("dynamic_batching") and not config.HasField("sequence_batching"):
        config.dynamic_batching.SetInParent()
    batching = config.max_batch_size > 0
    _fill_tensors(config.input, engine.inputs, batching, model_name)
    _fill_tensors(config.output, engine.outputs, batching, model_name)


__all__ = ["autocomplete_from_engine"]
