"""Triton's data types in numpy: the tables and conversions of triton_python_backend_utils.py, the type of an array
given to a Tensor, and the BYTES tensor wire format (serialize_byte_tensor / deserialize_bytes_tensor)."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt

from modelhost.backends.python.pb_utils.errors import TritonModelException

TRITON_STRING_TO_NUMPY: dict[str, type[Any]] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# TRITONSERVER_DataType values, which Tensor.triton_dtype() returns and triton_to_numpy_type() takes.
_TRITON_TO_NUMPY: dict[int, type[Any]] = {
    1: np.bool_,
    2: np.uint8,
    3: np.uint16,
    4: np.uint32,
    5: np.uint64,
    6: np.int8,
    7: np.int16,
    8: np.int32,
    9: np.int64,
    10: np.float16,
    11: np.float32,
    12: np.float64,
    13: np.object_,
}
TYPE_BYTES = 13


def triton_to_numpy_type(data_type: int) -> type[Any] | None:
    """A TRITONSERVER_DataType value (1 = BOOL ... 13 = BYTES) to its numpy type; None for any other."""
    return _TRITON_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type: Any) -> int | None:
    """A numpy dtype or type to its TRITONSERVER_DataType value; None when Triton has none."""
    for triton_type, numpy_type in _TRITON_TO_NUMPY.items():
        if triton_type != TYPE_BYTES and data_type == numpy_type:
            return triton_type
    if data_type == np.object_ or data_type == np.bytes_:
        return TYPE_BYTES
    return None


def triton_string_to_numpy(triton_type_string: str) -> type[Any]:
    """ "TYPE_FP32" -> np.float32 (KeyError for a name Triton does not know)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


_TRITON_TYPE_OF_DTYPE: dict[np.dtype[Any], int] = {}


def tensor_dtype(dtype: np.dtype[Any]) -> int:
    """The Triton type of an array given to Tensor (the C++ numpy_to_triton_type of pb_stub_utils.cc)."""
    known = _TRITON_TYPE_OF_DTYPE.get(dtype)
    if known is not None:  # the common case, looked up once: every tensor of every request comes here
        return known
    if dtype == np.object_ or dtype.type == np.bytes_:
        return TYPE_BYTES
    triton_type = numpy_to_triton_type(dtype)
    if triton_type is None:
        raise TritonModelException("NumPy dtype is not supported.")
    _TRITON_TYPE_OF_DTYPE[dtype] = triton_type
    return triton_type


def serialize_byte_tensor(input_tensor: npt.NDArray[Any]) -> bytes | tuple[()] | None:
    """A BYTES tensor (object or np.bytes_ array) as Triton's wire format: each element, in C order, preceded by
    its length as 4 bytes little-endian. As in Triton: () for an empty tensor, None for any other dtype."""
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        return None
    parts: list[bytes] = []
    for item in input_tensor.ravel(order="C"):
        # bytes go as they are; anything else (str, numbers) as its str() in UTF-8, as Triton does.
        data = bytes(item) if isinstance(item, bytes) else str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return b"".join(parts)


def deserialize_bytes_tensor(
    encoded_tensor: bytes | bytearray | memoryview | npt.NDArray[Any],
) -> npt.NDArray[Any]:
    """Triton's BYTES wire format back into a 1-D object array of bytes (struct.error when it is truncated)."""
    if isinstance(encoded_tensor, np.ndarray):
        buffer = np.ascontiguousarray(encoded_tensor).data.cast("B")
    else:
        buffer = memoryview(encoded_tensor).cast("B")
    items: list[bytes] = []
    offset = 0
    while offset < len(buffer):
        (length,) = struct.unpack_from("<I", buffer, offset)
        offset += 4
        (item,) = struct.unpack_from(f"<{length}s", buffer, offset)
        offset += length
        items.append(item)
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out
