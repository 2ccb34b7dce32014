"""Validation of a config's tensors: input, output, batch_input, batch_output (ValidateModelIOConfig)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tritonclient.grpc.model_config_pb2 import BatchInput, BatchOutput, DataType, ModelConfig, ModelInput

from modelhost.config import constants as c
from modelhost.config.invalid import InvalidConfig

WILDCARD_DIM = -1


def _element_count(dims: Sequence[int]) -> int:
    """Triton's GetElementCount: -1 when any dim is variable, 0 for no dims, else the product."""
    if not dims:
        return 0
    count = 1
    for dim in dims:
        if dim == WILDCARD_DIM:
            return WILDCARD_DIM
        count *= dim
    return count


def _fixed_chunks(dims: Iterable[int]) -> list[int]:
    """Element counts of the runs of fixed dims between variable ones: [2, 4, -1, 6] -> [8, 6]."""
    chunks, current = [], 1
    for dim in dims:
        if dim == WILDCARD_DIM:
            chunks.append(current)
            current = 1
        else:
            current *= dim
    chunks.append(current)
    return chunks


def _check_reshape(io: Any, prefix: str, max_batch_size: int) -> None:
    shape = list(io.reshape.shape)
    if not shape and max_batch_size == 0:
        raise InvalidConfig(
            prefix + "cannot have empty reshape for non-batching model as scalar tensors are not supported"
        )
    if any(dim < 1 and dim != WILDCARD_DIM for dim in shape):
        raise InvalidConfig(
            prefix
            + f"reshape dimensions must be integer >= 1, or {WILDCARD_DIM} to indicate a variable-size "
            "dimension"
        )
    dims = list(io.dims)
    dims_size, reshape_size = _element_count(dims), _element_count(shape)
    # An empty reshape (a scalar) matches dims of exactly one element.
    if dims_size != reshape_size and (reshape_size != 0 or dims_size != 1):
        raise InvalidConfig(prefix + "has different size for dims and reshape")
    if dims_size == WILDCARD_DIM:
        dims_chunks, shape_chunks = _fixed_chunks(dims), _fixed_chunks(shape)
        if len(dims_chunks) != len(shape_chunks):
            raise InvalidConfig(
                prefix + "has different number of variable-size dimensions for dims and reshape"
            )
        if dims_chunks != shape_chunks:
            raise InvalidConfig(prefix + "has different size for dims and reshape")


def _check_tensor(io: Any, kind: str, max_batch_size: int, platform: str) -> None:
    """Triton's ValidateModelInput/ValidateModelOutput; the caller appends " for <model>"."""
    if not io.name:
        raise InvalidConfig(f"model {kind} must specify 'name'")
    prefix = f"model {kind} '{io.name}' "
    if io.data_type == DataType.TYPE_INVALID:
        raise InvalidConfig(prefix + "must specify 'data_type'")
    if not io.dims:
        raise InvalidConfig(prefix + "must specify 'dims'")
    if any(dim < 1 and dim != WILDCARD_DIM for dim in io.dims):
        raise InvalidConfig(
            prefix
            + f"dimension must be integer >= 1, or {WILDCARD_DIM} to indicate a variable-size dimension"
        )
    if io.HasField("reshape"):
        _check_reshape(io, prefix, max_batch_size)
    if (
        kind == "input"
        and io.format in (ModelInput.FORMAT_NHWC, ModelInput.FORMAT_NCHW)
        and len(io.dims) != 3
    ):
        raise InvalidConfig("model input NHWC/NCHW require 3 dims")
    if io.is_shape_tensor and platform != c.TENSORRT_PLATFORM:
        raise InvalidConfig("shape tensors are only supported for TensorRT platform")
    if io.is_non_linear_format_io:
        if platform != c.TENSORRT_PLATFORM:
            raise InvalidConfig("Non-linear IO format is only supported for the TensorRT platform")
        if len(io.dims) != 3:
            raise InvalidConfig(f"Non-linear IO format {kind} requires 3 dims")


def _check_unique(names: Iterable[str], kind: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidConfig(f"model {kind} '{name}' is specified more than once")
        seen.add(name)


def _check_batch_io(config: ModelConfig) -> None:
    input_names = {io.name for io in config.input}
    output_names = {io.name for io in config.output}
    for batch_input in config.batch_input:
        kind = BatchInput.Kind.Name(batch_input.kind)
        if len(batch_input.source_input) != 1:
            raise InvalidConfig(
                f"batch input kind '{kind}' expects 1 source input, got {len(batch_input.source_input)}"
            )
        if batch_input.data_type not in (DataType.TYPE_INT32, DataType.TYPE_FP32):
            raise InvalidConfig("batch input data type must be TYPE_INT32 or TYPE_FP32")
        for source in batch_input.source_input:
            if source not in input_names:
                raise InvalidConfig(f"unknown source input name '{source}'")
    for batch_output in config.batch_output:
        kind = BatchOutput.Kind.Name(batch_output.kind)
        if len(batch_output.source_input) != 1:
            raise InvalidConfig(
                f"batch output kind '{kind}' expects 1 source input, got {len(batch_output.source_input)}"
            )
        for source in batch_output.source_input:
            if source not in input_names:
                raise InvalidConfig(f"unknown source input name '{source}'")
        targets: set[str] = set()
        for target in batch_output.target_name:
            if target not in output_names:
                raise InvalidConfig(f"unknown target output name '{target}'")
            if target in targets:
                raise InvalidConfig(f"target output name '{target}' can only be specified once")
            targets.add(target)


def validate_io(config: ModelConfig) -> None:
    """Raise InvalidConfig for the first broken tensor rule, worded as Triton's: "<what> for <model>"."""
    try:
        for model_input in config.input:
            _check_tensor(model_input, "input", config.max_batch_size, config.platform)
        for model_output in config.output:
            _check_tensor(model_output, "output", config.max_batch_size, config.platform)
        _check_unique((io.name for io in config.input), "input")
        _check_unique((io.name for io in config.output), "output")
        _check_batch_io(config)
    except InvalidConfig as err:
        raise InvalidConfig(f"{err.message} for {config.name}") from None


__all__ = ["WILDCARD_DIM", "validate_io"]
