"""Tensor bytes shared by every wire format: raw little-endian buffers and length-prefixed BYTES elements."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import numpy.typing as npt

from modelhost.datatypes import WIRE_ELEMENT_SIZE, WIRE_TO_NUMPY
from modelhost.errors import InvalidArgument

_LEN = struct.Struct("<I")


def element_count(name: str, shape: list[int]) -> int:
    for d in shape:
        if d < 0:
            raise InvalidArgument(f"invalid shape {shape} for input '{name}': dimensions must not be negative")
    return math.prod(shape)


def parse_shape(name: str, raw: Any) -> list[int]:
    if not isinstance(raw, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in raw):
        raise InvalidArgument(f"shape of input '{name}' must be an array of integers")
    for d in raw:
        if d < 0 or d > 2**63 - 1:
            raise InvalidArgument(f"invalid shape {raw} for input '{name}': dimensions must be in [0, 2^63-1]")
    return raw


def deserialize_bytes(name: str, buffer: bytes | memoryview, count: int) -> npt.NDArray[Any]:
    """BYTES elements, each a 4-byte little-endian length then that many bytes."""
    view = memoryview(buffer)
    size = len(view)
    out = np.empty(count, dtype=object)
    offset = 0
    for i in range(count):
        if offset + 4 > size:
            raise InvalidArgument(
                f"unexpected number of string elements for input '{name}': expected {count}, "
                f"the data holds only {i}"
            )
        (length,) = _LEN.unpack_from(view, offset)
        offset += 4
        if offset + length > size:
            raise InvalidArgument(f"string element {i} of input '{name}' runs past the end of the data")
        out[i] = bytes(view[offset : offset + length])
        offset += length
    if offset != size:
        raise InvalidArgument(
            f"unexpected number of string elements for input '{name}': the data holds more than the {count} "
            "elements of its shape"
        )
    return out


def serialize_bytes(array: npt.NDArray[Any]) -> bytes:
    parts: list[bytes] = []
    for item in array.ravel():
        b = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts.append(_LEN.pack(len(b)))
        parts.append(b)
    return b"".join(parts)


def array_from_raw(name: str, datatype: str, shape: list[int], buffer: bytes | memoryview) -> npt.NDArray[Any]:
    """A tensor over a received buffer (no copy for fixed-size types)."""
    count = element_count(name, shape)
    if datatype == "BYTES":
        return deserialize_bytes(name, buffer, count).reshape(shape)
    itemsize = WIRE_ELEMENT_SIZE[datatype]
    assert itemsize is not None
    expected = count * itemsize
    if len(buffer) != expected:
        raise InvalidArgument(
            f"unexpected total byte size {len(buffer)} for input '{name}', expecting {expected}"
        )
    return np.frombuffer(buffer, dtype=WIRE_TO_NUMPY[datatype]).reshape(shape)


def raw_bytes(datatype: str, array: npt.NDArray[Any]) -> bytes:
    if datatype == "BYTES":
        return serialize_bytes(array)
    return np.ascontiguousarray(array).tobytes()
