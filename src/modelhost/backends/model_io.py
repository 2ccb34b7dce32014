"""Checking a config's inputs and outputs against what the model file declares, at load.

A config that contradicts its model (a name the model lacks, another datatype, another shape) must leave the
model UNAVAILABLE with the field named, as Triton's backends refuse it, never READY with every request then
failing inside the runtime. Each backend describes its model's tensors as `TensorInfo` and calls `check_io`.
Wording follows Triton's backends (backend_common.cc CompareDims, the ONNX Runtime backend's type check).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc.model_config_pb2 import DataType

from modelhost.backends.sequence import server_fed_inputs
from modelhost.errors import ModelConfigError


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor as the model declares it: `data_type` a config type name ("TYPE_FP32"); `dims` its full shape
    including any batch dimension, -1 where the model accepts any size; None where the model does not say
    (a TorchScript argument, a tree model's rank), which skips the shape check."""

    name: str
    data_type: str | None
    dims: tuple[int, ...] | None = None


def _shape(dims: Iterable[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def config_shape(tensor: Any) -> list[int]:
    """The shape the model sees for a config tensor: its `reshape` where it has one, else its `dims`."""
    if tensor.HasField("reshape"):
        return list(tensor.reshape.shape)
    return list(tensor.dims)


def check_dims(
    model_name: str, tensor: Any, model_dims: Sequence[int], max_batch_size: int, *, exact: bool = False
) -> None:
    """The config's shape (with the batch dimension when max_batch_size > 0) must match the model's: same rank,
    and each model dimension -1 or equal; a config -1 against a fixed model dimension passes unless `exact`."""
    shape = config_shape(tensor)
    batching = max_batch_size > 0
    if batching and (not model_dims or model_dims[0] not in (-1, 0)):
        raise ModelConfigError(
            f"model '{model_name}', tensor '{tensor.name}': for the model to support batching the shape should "
            "have at least 1 dimension and the first dimension must be -1; but shape expected by the model is "
            f"{_shape(model_dims)}"
        )
    full = [-1, *shape] if batching else shape
    compared = list(model_dims)
    mismatch = len(full) != len(compared)
    if not mismatch:
        for configured, actual in zip(full, compared, strict=True):
            if actual in (-1, 0) or (configured == -1 and not exact):
                continue
            if configured != actual:
                mismatch = True
                break
    if mismatch:
        if batching:
            specified = (
                f"{len(full)} dimensions (an initial batch dimension because max_batch_size > 0 followed by the "
                f"explicit tensor shape, making complete shape {_shape(full)})"
            )
        else:
            specified = f"{len(full)} dimensions (shape {_shape(full)})"
        raise ModelConfigError(
            f"model '{model_name}', tensor '{tensor.name}': the model expects {len(compared)} dimensions (shape "
            f"{_shape(compared)}) but the model configuration specifies {specified}"
        )


def fed_by_server(config: Any) -> set[str]:
    """Model inputs the server feeds and a config does not list as inputs: a sequence batcher's control inputs
    and implicit state, and ragged batching's batch inputs."""
    return server_fed_inputs(config) | {name for b in config.batch_input for name in b.target_name}


def check_io(
    model_name: str,
    config: Any,
    inputs: Mapping[str, TensorInfo],
    outputs: Mapping[str, TensorInfo],
    *,
    fed_by_server: Iterable[str] = (),
    check_missing_inputs: bool = True,
) -> None:
    """Every config input and output must exist in the model with the same datatype and a compatible shape, and
    every model input must be in the config (or be fed by the server: sequence controls, implicit state, batch
    inputs, named in `fed_by_server`)."""
    scattered = {name for b in config.batch_output for name in b.target_name}
    for kind, configured, available in (("input", config.input, inputs), ("output", config.output, outputs)):
        for tensor in configured:
            found = available.get(tensor.name)
            if found is None:
                raise ModelConfigError(
                    f"unable to load model '{model_name}', configuration expects {kind} '{tensor.name}' "
                    f"but the model has only {sorted(available)}"
                )
            expected = DataType.Name(tensor.data_type)
            if found.data_type is not None and found.data_type != expected:
                raise ModelConfigError(
                    f"unable to load model '{model_name}', configuration expects datatype {expected} for "
                    f"{kind} '{tensor.name}', model provides {found.data_type}"
                )
            # A ragged input reaches the model flattened, and a batch output leaves it so: neither has its config
            # shape in the model (Triton skips both too).
            if (
                found.dims is not None
                and not getattr(tensor, "allow_ragged_batch", False)
                and (tensor.name not in scattered)
            ):
                check_dims(model_name, tensor, found.dims, int(config.max_batch_size))
    if check_missing_inputs:
        listed = {t.name for t in config.input} | set(fed_by_server)
        required = [name for name in inputs if name not in listed]
        if required:
            raise ModelConfigError(
                f"unable to load model '{model_name}', model input(s) {required} are missing from the configuration"
            )


__all__ = ["TensorInfo", "check_dims", "check_io", "config_shape", "fed_by_server"]
