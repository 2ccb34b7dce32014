"""Tensor bytes shared by every wire format: raw little-endian buffers and length-prefixed BYTES elements.

Error messages use Triton's wording (core's input validation), since clients and Triton's own tests match on
it; `model` and `request_id` name the request in them as Triton does.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import numpy.typing as npt

from modelhost.datatypes import WIRE_ELEMENT_SIZE, WIRE_TO_NUMPY
from modelhost.errors import InvalidArgument
from modelhost.io_specs import format_shape

_LEN = struct.Struct("<I")
# numpy cannot describe an array whose dims (zeros left out) multiply past this, even an empty one: larger
# shapes are refused up front instead of failing deep inside numpy (object arrays: 8 bytes an element).
_MAX_ELEMENTS = (2**63 - 1) // 8
# numpy's limit on an array's dimensions (NPY_MAXDIMS: 64 from numpy 2, 32 before).
MAX_DIMS = 64 if int(np.__version__.split(".")[0]) >= 2 else 32


def id_prefix(request_id: str) -> str:
    """Triton's prefix of request-validation errors."""
    return f"[request id: {request_id or '<id_unknown>'}] "


def element_count(name: str, shape: list[int], model: str = "", request_id: str = "") -> int:
    """The element count of a request shape; never allocates, whatever the dims claim."""
    if len(shape) > MAX_DIMS:
        raise InvalidArgument(
            id_prefix(request_id)
            + f"input '{name}' for model '{model}' has {len(shape)} dimensions, more than "
            f"the {MAX_DIMS} a tensor can have"
        )
    for d in shape:
        if d < 0:
            raise InvalidArgument(
                id_prefix(request_id)
                + f"All input dimensions should be specified for input '{name}' for model "
                f"'{model}', got {format_shape(shape)}"
            )
    if math.prod(d for d in shape if d) > _MAX_ELEMENTS:
        raise InvalidArgument(
            id_prefix(request_id) + f"input '{name}' for model '{model}' has shape {format_shape(shape)}, "
            "too large for any tensor"
        )
    return math.prod(shape)


def deserialize_bytes(
    name: str, buffer: bytes | memoryview, count: int, model: str = "", request_id: str = ""
) -> npt.NDArray[Any]:
    """BYTES elements, each a 4-byte little-endian length then that many bytes.

    The whole buffer is walked (as Triton does, to report how many elements it holds), and the result is sized
    by what the buffer holds, never by the count the shape claims. One element costs a Python iteration, so the
    loop is kept lean: slices of one bytes object (an empty one is a shared constant), no per-element checks
    beyond the two bounds.
    """
    data = buffer if isinstance(buffer, bytes) else bytes(buffer)
    size = len(data)
    items: list[bytes] = []
    append = items.append
    unpack = _LEN.unpack_from
    offset = 0
    while offset < size:
        if size - offset < 4:
            raise InvalidArgument(
                id_prefix(request_id)
                + f"incomplete string length indicator for inference input '{name}' for "
                f"model '{model}', expecting 4 bytes but only {size - offset} bytes available. Please make sure "
                "the string length indicator is in one buffer."
            )
        start = offset + 4
        offset = start + unpack(data, start - 4)[0]
        if offset > size:
            raise InvalidArgument(
                f"incomplete string data for inference input '{name}', expecting string of length "
                f"{offset - start} but only {size - start} bytes available"
            )
        append(data[start:offset])
    if len(items) != count:
        raise string_count_mismatch(name, count, len(items), model, request_id)
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def string_count_mismatch(name: str, expected: int, got: int, model: str, request_id: str) -> InvalidArgument:
    if got > expected:
        return InvalidArgument(
            id_prefix(request_id)
            + f"unexpected number of string elements {got} for inference input '{name}' "
            f"for model '{model}', expecting {expected}"
        )
    return InvalidArgument(
        id_prefix(request_id) + f"expected {expected} string elements for inference input '{name}' for model "
        f"'{model}', got {got}"
    )


def serialize_bytes(array: npt.NDArray[Any]) -> bytes:
    parts: list[bytes] = []
    for item in array.ravel():
        b = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts.append(_LEN.pack(len(b)))
        parts.append(b)
    return b"".join(parts)


def byte_size_mismatch(name: str, expected: int, got: int, model: str, request_id: str) -> InvalidArgument:
    return InvalidArgument(
        id_prefix(request_id) + f"input byte size mismatch for input '{name}' for model '{model}'. "
        f"Expected {expected}, got {got}"
    )


def array_from_raw(
    name: str,
    datatype: str,
    shape: list[int],
    buffer: bytes | memoryview,
    model: str = "",
    request_id: str = "",
) -> npt.NDArray[Any]:
    """A tensor over a received buffer (no copy for fixed-size types)."""
    count = element_count(name, shape, model, request_id)
    if datatype == "BYTES":
        return deserialize_bytes(name, buffer, count, model, request_id).reshape(shape)
    itemsize = WIRE_ELEMENT_SIZE[datatype]
    assert itemsize is not None
    expected = count * itemsize
    if len(buffer) != expected:
        raise byte_size_mismatch(name, expected, len(buffer), model, request_id)
    return np.frombuffer(buffer, dtype=WIRE_TO_NUMPY[datatype]).reshape(shape)


def raw_bytes(datatype: str, array: npt.NDArray[Any]) -> bytes:
    if datatype == "BYTES":
        return serialize_bytes(array)
    return np.ascontiguousarray(array).tobytes()
