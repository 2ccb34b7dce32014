"""OpenVINO element types against config datatypes, and numpy arrays in and out of OpenVINO tensors.

Triton's openvino backend maps BOOL, UINT8..64, INT8..64, FP16 and FP32. OpenVINO also has f64, bf16 and string
tensors, which cost nothing more here, so FP64, BF16 and STRING are served too. BF16 travels in the server as raw
16-bit words (numpy has no bfloat16): they are handed to OpenVINO as bf16 without conversion, and read back the
same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import openvino as ov  # type: ignore[import-untyped, unused-ignore]

from modelhost.errors import BackendInvalidArgument

# OpenVINO element type name (`Type.get_type_name()`) -> config datatype.
OV_TO_CONFIG: Final[dict[str, str]] = {
    "boolean": "TYPE_BOOL",
    "u8": "TYPE_UINT8",
    "u16": "TYPE_UINT16",
    "u32": "TYPE_UINT32",
    "u64": "TYPE_UINT64",
    "i8": "TYPE_INT8",
    "i16": "TYPE_INT16",
    "i32": "TYPE_INT32",
    "i64": "TYPE_INT64",
    "f16": "TYPE_FP16",
    "f32": "TYPE_FP32",
    "f64": "TYPE_FP64",
    "bf16": "TYPE_BF16",
    "string": "TYPE_STRING",
}
CONFIG_TO_OV: Final[dict[str, str]] = {config: name for name, config in OV_TO_CONFIG.items()}


def type_name(element_type: Any) -> str:
    """An OpenVINO element type's short name ("f32")."""
    return str(element_type.get_type_name())


def config_type(element_type: Any) -> str | None:
    """The config datatype of an OpenVINO element type; None for those with none (u4, nf4, f8, dynamic)."""
    return OV_TO_CONFIG.get(type_name(element_type))


def convertible(config_datatype: str, element_type: Any) -> bool:
    """Whether a config datatype can stand for a model tensor of `element_type`: the same type, or two numeric
    types, between which the model is given a conversion (Triton's openvino backend sets every tensor's element
    type to the config's with OpenVINO's pre/post-processing, so a TYPE_UINT8 input may feed an f32 model)."""
    model_datatype = config_type(element_type)
    if model_datatype is None or config_datatype not in CONFIG_TO_OV:
        return False
    if model_datatype == config_datatype:
        return True
    return "TYPE_STRING" not in (model_datatype, config_datatype)


def ov_type(config_datatype: str) -> Any:
    # By attribute: ov.Type("u8") reads its argument as a numpy type string (uint64), not as OpenVINO's name.
    return getattr(ov.Type, CONFIG_TO_OV[config_datatype])


# -- numpy <-> ov.Tensor, per datatype, chosen once at load so that a batch pays no lookups -----------------------

Array = npt.NDArray[Any]
# array -> (ov.Tensor, the array whose memory it wraps): the caller holds the latter until the request has run,
# as an ov.Tensor made from (array, shape, type) does not keep its array alive.
Writer = Callable[[Array], tuple[Any, Array]]
Reader = Callable[[Any, "int | None"], Array]  # ov.Tensor, rows to keep (None: all) -> array


def _numeric_writer(element_type: Any) -> Writer:
    dtype = np.dtype(element_type.to_dtype())

    def write(array: Array) -> tuple[Any, Array]:
        # Shares the array's memory, read-only arrays from the wire included: the (array, shape, type)
        # constructor wraps them, where shared_memory=True refuses them.
        data = np.ascontiguousarray(array, dtype=dtype)
        return ov.Tensor(data, data.shape, element_type), data

    return write


def _bf16_in(array: Array) -> tuple[Any, Array]:
    words = np.ascontiguousarray(array, dtype=np.uint16)
    return ov.Tensor(words, words.shape, ov.Type.bf16), words


def _string_in(array: Array) -> tuple[Any, Array]:
    values = [v if isinstance(v, bytes) else str(v).encode("utf-8") for v in array.ravel()]
    # OpenVINO's Python API fills string tensors from numpy fixed-width bytes, which cannot hold an element that
    # ends in a NUL byte (numpy strips trailing NULs): such an input is refused rather than silently changed.
    if any(v.endswith(b"\x00") for v in values):
        raise BackendInvalidArgument("OpenVINO string tensors cannot hold an element that ends in a NUL byte")
    data = np.array(values, dtype=np.bytes_).reshape(array.shape)
    return ov.Tensor(data), data  # a copy: OpenVINO keeps strings as its own objects


def _numeric_out(tensor: Any, rows: int | None) -> Array:
    data = tensor.data
    # A copy: the request reuses its output memory on the next run.
    return np.array(data if rows is None else data[:rows], copy=True)


def _bf16_out(tensor: Any, rows: int | None) -> Array:
    # OpenVINO shows bf16 memory as float16, which it is not: the raw words are what the server carries.
    data = tensor.data.view(np.uint16)
    return np.array(data if rows is None else data[:rows], copy=True)


def _string_out(tensor: Any, rows: int | None) -> Array:
    # `bytes_data` is numpy fixed-width bytes of the tensor's shape; the server carries objects of `bytes`.
    data = tensor.bytes_data
    values: Array = data.astype(object) if rows is None else data[:rows].astype(object)
    return values


def tensor_writer(config_datatype: str) -> Writer:
    """How an input array of `config_datatype` becomes an ov.Tensor of that type."""
    if config_datatype == "TYPE_BF16":
        return _bf16_in
    if config_datatype == "TYPE_STRING":
        return _string_in
    return _numeric_writer(ov_type(config_datatype))


def casting_writer(element_type: Any) -> Writer:
    """How an input the server feeds (a sequence control, implicit state) becomes an ov.Tensor of the model's own
    element type, whatever datatype the config gives the control."""
    datatype = config_type(element_type)
    if datatype in ("TYPE_BF16", "TYPE_STRING"):
        return tensor_writer(datatype)
    return _numeric_writer(element_type)


def tensor_reader(config_datatype: str) -> Reader:
    """How an output ov.Tensor of `config_datatype` becomes an array (its first `rows` rows, or all of it)."""
    if config_datatype == "TYPE_BF16":
        return _bf16_out
    if config_datatype == "TYPE_STRING":
        return _string_out
    return _numeric_out


__all__ = [
    "CONFIG_TO_OV",
    "OV_TO_CONFIG",
    "Reader",
    "Writer",
    "config_type",
    "convertible",
    "ov_type",
    "tensor_reader",
    "tensor_writer",
    "type_name",
]
