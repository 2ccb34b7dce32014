"""Triton's data types in numpy and the BYTES tensor wire format."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from modelhost.backends.python import pb_utils


def test_type_maps() -> None:
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.triton_string_to_numpy("TYPE_BOOL") is bool
    with pytest.raises(KeyError):
        pb_utils.triton_string_to_numpy("TYPE_BF16")
    for code in range(1, 14):
        numpy_type = pb_utils.triton_to_numpy_type(code)
        assert numpy_type is not None
        assert pb_utils.numpy_to_triton_type(numpy_type) == code
        assert pb_utils.numpy_to_triton_type(np.dtype(numpy_type)) == code
    assert pb_utils.triton_to_numpy_type(0) is None
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.numpy_to_triton_type(np.complex64) is None


def test_bytes_serialization_is_tritons_wire_format() -> None:
    array = np.array([[b"ab", b""], ["é", 5]], dtype=np.object_)
    encoded = pb_utils.serialize_byte_tensor(array)
    # Each element in C order, after its length as 4 bytes little-endian; str as UTF-8, others as their str().
    assert (
        encoded
        == b"\x02\x00\x00\x00ab" + b"\x00\x00\x00\x00" + b"\x02\x00\x00\x00\xc3\xa9" + b"\x01\x00\x00\x005"
    )
    assert isinstance(encoded, bytes)
    decoded = pb_utils.deserialize_bytes_tensor(encoded)
    assert decoded.dtype == np.object_ and decoded.shape == (4,)
    assert decoded.tolist() == [b"ab", b"", "é".encode(), b"5"]
    # The stub hands it numpy buffers too.
    assert (
        pb_utils.deserialize_bytes_tensor(np.frombuffer(encoded, dtype=np.uint8)).tolist() == decoded.tolist()
    )
    # np.bytes_ arrays drop trailing zero bytes (why Triton asks for object arrays); that is numpy's doing.
    assert pb_utils.serialize_byte_tensor(np.array([b"xy"], dtype="S2")) == b"\x02\x00\x00\x00xy"
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=np.object_)) == ()
    assert pb_utils.serialize_byte_tensor(np.array([1, 2], dtype=np.int32)) is None
    with pytest.raises(struct.error):
        pb_utils.deserialize_bytes_tensor(b"\x05\x00\x00\x00ab")
