"""What modelhost needs to know of a deserialized TensorRT engine, as plain data.

`adapter.py` reads it from an ICudaEngine; auto-complete, the config checks and the per-request profile choice
work on it alone, so they run (and are tested) without TensorRT or a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

Shape = tuple[int, ...]

# TensorRT DataType member name -> model config type (Triton's ConvertTrtTypeToConfigDataType). FP8, INT4, FP4
# and the like have no Triton datatype: engines using them at their inputs or outputs cannot be served.
TRT_TO_CONFIG: Final[dict[str, str]] = {
    "FLOAT": "TYPE_FP32",
    "HALF": "TYPE_FP16",
    "BF16": "TYPE_BF16",
    "INT8": "TYPE_INT8",
    "UINT8": "TYPE_UINT8",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "BOOL": "TYPE_BOOL",
}

# Bytes per element of the types above (BF16 travels as raw 16-bit words, see modelhost/datatypes.py).
TRT_ITEMSIZE: Final[dict[str, int]] = {
    "FLOAT": 4,
    "HALF": 2,
    "BF16": 2,
    "INT8": 1,
    "UINT8": 1,
    "INT32": 4,
    "INT64": 8,
    "BOOL": 1,
}


@dataclass(frozen=True, slots=True)
class ProfileShapes:
    """The shapes one optimization profile accepts for one input: every request shape must lie between `min`
    and `max` dimension by dimension; TensorRT tuned its kernels for `opt`."""

    min: Shape
    opt: Shape
    max: Shape


@dataclass(frozen=True, slots=True)
class EngineTensor:
    """One input or output of the engine. `shape` has -1 where the engine accepts any size (within the profile
    for inputs; decided by the data for some outputs). `profiles` (inputs only) has one entry per profile."""

    name: str
    is_input: bool
    trt_type: str  # TensorRT DataType member name: "FLOAT", "HALF", ...
    shape: Shape
    profiles: tuple[ProfileShapes, ...] = ()
    is_shape_tensor: bool = False
    linear_format: bool = True

    @property
    def config_type(self) -> str | None:
        """The model config datatype, or None for a TensorRT type Triton has no name for."""
        return TRT_TO_CONFIG.get(self.trt_type)

    @property
    def dynamic(self) -> bool:
        return -1 in self.shape


@dataclass(frozen=True, slots=True)
class EngineDescription:
    tensors: tuple[EngineTensor, ...]
    num_profiles: int = 1
    # The TensorRT library that deserialized the engine (plans load only into the version that built them).
    tensorrt_version: str = ""
    _by_name: dict[str, EngineTensor] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {t.name: t for t in self.tensors})

    @property
    def inputs(self) -> list[EngineTensor]:
        return [t for t in self.tensors if t.is_input]

    @property
    def outputs(self) -> list[EngineTensor]:
        return [t for t in self.tensors if not t.is_input]

    def tensor(self, name: str) -> EngineTensor | None:
        return self._by_name.get(name)

    @property
    def has_dynamic_shapes(self) -> bool:
        return any(t.dynamic for t in self.tensors)


def shape_string(dims: Sequence[int]) -> str:
    """Triton's ShapeToString: [1,3,224,224]."""
    return "[" + ",".join(str(d) for d in dims) + "]"


__all__ = [
    "TRT_ITEMSIZE",
    "TRT_TO_CONFIG",
    "EngineDescription",
    "EngineTensor",
    "ProfileShapes",
    "Shape",
    "shape_string",
]
