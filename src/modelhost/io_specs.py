"""Input and output specifications of a loaded model, compiled once from its config for per-request checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from modelhost.datatypes import CONFIG_TO_WIRE, WIRE_TO_NUMPY


@dataclass(frozen=True, slots=True)
class TensorSpec:
    name: str
    datatype: str  # KServe name
    dtype: np.dtype[Any]
    # Shape without the batch dimension, as configured (-1 = variable).
    dims: tuple[int, ...]
    # The shape the model itself sees (without the batch dimension), or None when equal to dims.
    reshape: tuple[int, ...] | None
    optional: bool = False
    label_filename: str = ""

    def full_shape(self, max_batch_size: int) -> list[int]:
        """The shape reported in metadata: with a leading -1 for batching models."""
        return ([-1] if max_batch_size > 0 else []) + list(self.dims)


def _spec(tensor: Any, *, optional: bool = False, label_filename: str = "") -> TensorSpec:
    data_type_name = (
        tensor.DESCRIPTOR.fields_by_name["data_type"].enum_type.values_by_number[tensor.data_type].name
    )
    datatype = CONFIG_TO_WIRE[data_type_name]
    reshape = tuple(int(d) for d in tensor.reshape.shape) if tensor.HasField("reshape") else None
    return TensorSpec(
        name=tensor.name,
        datatype=datatype,
        dtype=WIRE_TO_NUMPY[datatype],
        dims=tuple(int(d) for d in tensor.dims),
        reshape=reshape,
        optional=optional,
        label_filename=label_filename,
    )


def input_specs(config: Any) -> dict[str, TensorSpec]:
    return {t.name: _spec(t, optional=t.optional) for t in config.input}


def output_specs(config: Any) -> dict[str, TensorSpec]:
    return {t.name: _spec(t, label_filename=t.label_filename) for t in config.output}


def shape_matches(shape: list[int] | tuple[int, ...], dims: tuple[int, ...]) -> bool:
    if len(shape) != len(dims):
        return False
    return all(d == -1 or d == s for s, d in zip(shape, dims, strict=True))


def format_shape(shape: list[int] | tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"
