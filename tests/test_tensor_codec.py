"""The tensor codec every wire format shares: raw little-endian buffers and length-prefixed BYTES elements, and
the refusals in Triton's words (clients and Triton's own tests match on them; the e2e bad-input tests check them
over HTTP and gRPC, these without a server)."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from modelhost.datatypes import WIRE_TO_NUMPY
from modelhost.errors import InvalidArgument
from modelhost.tensor_codec import (
    MAX_DIMS,
    array_from_raw,
    deserialize_bytes,
    element_count,
    id_prefix,
    raw_bytes,
    serialize_bytes,
)

# BOOL, INT8..64, UINT8..64, FP16/32/64, and BF16 (raw uint16 words).
FIXED = [t for t in WIRE_TO_NUMPY if t != "BYTES"]
SHAPES = [[], [0], [3], [2, 3], [2, 0, 3], [1, 1, 1, 2]]
# Bounded and fixed: the same examples on every run, a fraction of a second in all (tests/fuzz fuzzes the wire).
EXAMPLES = settings(max_examples=60, derandomize=True, deadline=None, database=None)


def _le(*lengths_and_data: int | bytes) -> bytes:
    """BYTES wire data: an int is a 4-byte little-endian length, bytes are sent as they are."""
    return b"".join(struct.pack("<I", x) if isinstance(x, int) else x for x in lengths_and_data)


def _message(excinfo: pytest.ExceptionInfo[InvalidArgument]) -> str:
    return str(excinfo.value)


def _sample(datatype: str, shape: list[int]) -> npt.NDArray[Any]:
    """Values that reach both ends of the type (and, for floats, the special values)."""
    dtype = WIRE_TO_NUMPY[datatype]
    count = int(np.prod(shape))
    if dtype == np.bool_:
        values: npt.NDArray[Any] = np.arange(count) % 2 == 0
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = np.resize(np.array([info.min, info.max, 0, 1], dtype=dtype), count)
    else:
        values = np.resize(np.array([np.finfo(dtype).max, -0.0, np.inf, 1.5], dtype=dtype), count)
    return values.astype(dtype).reshape(shape)


# -- round trips ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("datatype", FIXED)
def test_every_fixed_size_type_round_trips_through_little_endian_bytes(
    datatype: str, shape: list[int]
) -> None:
    array = _sample(datatype, shape)
    data = raw_bytes(datatype, array)
    dtype = WIRE_TO_NUMPY[datatype]
    assert len(data) == array.size * dtype.itemsize
    assert data == array.astype(dtype.newbyteorder("<")).tobytes()  # little-endian, whatever the host
    back = array_from_raw("x", datatype, shape, data)
    assert back.dtype == dtype and list(back.shape) == shape
    assert back.tobytes() == array.tobytes()


def test_nan_keeps_its_bits() -> None:
    array = np.array([np.nan, -np.nan], dtype=np.float32)
    back = array_from_raw("x", "FP32", [2], raw_bytes("FP32", array))
    assert back.tobytes() == array.tobytes()


def test_a_non_contiguous_array_is_sent_in_logical_order() -> None:
    array = np.arange(6, dtype=np.int32).reshape(2, 3).T  # Fortran order in memory
    back = array_from_raw("x", "INT32", [3, 2], raw_bytes("INT32", array))
    assert back.tolist() == [[0, 3], [1, 4], [2, 5]]


BYTES_CASES: dict[str, tuple[list[Any], list[int]]] = {
    "plain": ([b"ab", b"c"], [2]),
    "empty strings": ([b"", b"x", b""], [3]),
    "non-ascii": (["é€".encode(), b"\xff\xfe"], [1, 2]),
    "embedded NULs": ([b"\x00", b"a\x00b", b"\x00\x00\x00\x00"], [3]),
    "zero elements": ([], [0]),
    "zero elements, multi-d": ([], [2, 0, 4]),
    "0-d": ([b"scalar"], []),
    "multi-d": ([bytes([i]) * i for i in range(6)], [2, 3]),
}


@pytest.mark.parametrize("values, shape", BYTES_CASES.values(), ids=BYTES_CASES.keys())
def test_bytes_round_trip(values: list[bytes], shape: list[int]) -> None:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    array = array.reshape(shape)
    data = raw_bytes("BYTES", array)
    assert data == b"".join(_le(len(v), v) for v in values)
    back = array_from_raw("x", "BYTES", shape, data)
    assert back.dtype == np.object_ and list(back.shape) == shape
    assert back.ravel().tolist() == values
    assert all(type(v) is bytes for v in back.ravel())


def test_bytes_elements_given_as_text_go_out_in_utf8() -> None:
    array = np.array(["é", np.str_("ab"), np.bytes_(b"\x00z")], dtype=object)
    assert serialize_bytes(array) == _le(2, "é".encode(), 2, b"ab", 2, b"\x00z")
    # A str array (a model's outputs, numpy's own string type) is sent the same way.
    assert serialize_bytes(np.array(["é", "ab"])) == _le(2, "é".encode(), 2, b"ab")


def test_bytes_from_a_memoryview_read_as_from_bytes() -> None:
    data = _le(1, b"a", 0, 3, b"b\x00c")
    assert deserialize_bytes("x", memoryview(bytearray(data)), 3).tolist() == [b"a", b"", b"b\x00c"]


@EXAMPLES
@given(
    st.sampled_from(FIXED).flatmap(
        lambda t: hnp.arrays(
            WIRE_TO_NUMPY[t], hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
        ).map(lambda a: (t, a))
    )
)
def test_any_fixed_size_tensor_round_trips(case: tuple[str, npt.NDArray[Any]]) -> None:
    datatype, array = case
    back = array_from_raw("x", datatype, list(array.shape), raw_bytes(datatype, array))
    assert back.shape == array.shape and back.tobytes() == array.tobytes()


@EXAMPLES
@given(
    hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3).flatmap(
        lambda shape: st.lists(
            st.binary(max_size=12), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))
        ).map(lambda values: (list(shape), values))
    )
)
def test_any_bytes_tensor_round_trips(case: tuple[list[int], list[bytes]]) -> None:
    shape, values = case
    array = np.empty(len(values), dtype=object)
    array[:] = values
    back = array_from_raw("x", "BYTES", shape, raw_bytes("BYTES", array.reshape(shape)))
    assert list(back.shape) == shape and back.ravel().tolist() == values


# -- no copy -------------------------------------------------------------------------------------------------


def test_a_fixed_size_tensor_is_a_read_only_view_over_received_bytes() -> None:
    data = np.arange(4, dtype=np.int32).tobytes()
    array = array_from_raw("x", "INT32", [2, 2], data)
    assert not array.flags.writeable  # a model cannot write into the request's buffer
    assert np.shares_memory(array, np.frombuffer(data, dtype=np.uint8))
    with pytest.raises(ValueError, match="read-only"):
        array[0, 0] = 7


def test_a_fixed_size_tensor_over_a_memoryview_shares_its_memory() -> None:
    buffer = bytearray(np.arange(4, dtype=np.int32).tobytes())
    array = array_from_raw("x", "INT32", [4], memoryview(buffer))
    buffer[0] = 9  # no copy: the tensor sees the change
    assert array.tolist() == [9, 1, 2, 3]
    readonly = array_from_raw("x", "INT32", [4], memoryview(bytes(buffer)))
    assert not readonly.flags.writeable


# -- element counts ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, count", [([], 1), ([0], 0), ([5], 5), ([2, 3, 4], 24), ([3, 0, 7], 0), ([1] * MAX_DIMS, 1)]
)
def test_element_count(shape: list[int], count: int) -> None:
    assert element_count("x", shape) == count


def test_a_dimension_left_unspecified_is_refused() -> None:
    with pytest.raises(InvalidArgument) as excinfo:
        element_count("INPUT0", [1, -1], "simple", "r1")
    assert _message(excinfo) == (
        "[request id: r1] All input dimensions should be specified for input 'INPUT0' for model 'simple', "
        "got [1,-1]"
    )


def test_more_dimensions_than_a_tensor_can_have_are_refused() -> None:
    with pytest.raises(InvalidArgument) as excinfo:
        element_count("INPUT0", [1] * (MAX_DIMS + 1), "simple", "r1")
    assert _message(excinfo) == (
        f"[request id: r1] input 'INPUT0' for model 'simple' has {MAX_DIMS + 1} dimensions, more than the "
        f"{MAX_DIMS} a tensor can have"
    )


@pytest.mark.parametrize(
    "shape", [[2**62, 2**62], [2**62, 2**62, 0], [2**63, 1]], ids=["overflow", "empty but huge", "one dim"]
)
def test_a_shape_no_tensor_can_have_is_refused_even_when_empty(shape: list[int]) -> None:
    with pytest.raises(InvalidArgument) as excinfo:
        element_count("INPUT0", shape, "simple")
    dims = ",".join(map(str, shape))
    assert _message(excinfo) == (
        f"[request id: <id_unknown>] input 'INPUT0' for model 'simple' has shape [{dims}], "
        "too large for any tensor"
    )


def test_the_largest_shape_numpy_can_describe_is_counted() -> None:
    largest = (2**63 - 1) // 8  # numpy's limit for an object array (8 bytes an element), even an empty one
    assert element_count("x", [largest]) == largest
    assert element_count("x", [largest, 0]) == 0
    assert np.empty((largest, 0), dtype=object).size == 0  # what the limit protects: numpy can make it
    with pytest.raises(InvalidArgument, match="too large for any tensor"):
        element_count("x", [largest + 1, 0])


def test_errors_name_the_request_as_triton_does() -> None:
    assert id_prefix("") == "[request id: <id_unknown>] "
    assert id_prefix("abc") == "[request id: abc] "


# -- refusals of the data ------------------------------------------------------------------------------------


@pytest.mark.parametrize("got", [7, 9, 0])
def test_a_fixed_size_tensor_of_the_wrong_byte_size_is_refused(got: int) -> None:
    with pytest.raises(InvalidArgument) as excinfo:
        array_from_raw("INPUT0", "FP32", [2], bytes(got), "simple", "r1")
    assert _message(excinfo) == (
        "[request id: r1] input byte size mismatch for input 'INPUT0' for model 'simple'. "
        f"Expected 8, got {got}"
    )


def test_the_byte_size_is_checked_against_the_type() -> None:
    with pytest.raises(InvalidArgument) as excinfo:
        array_from_raw("INPUT0", "BOOL", [2], b"\x01")
    assert _message(excinfo).endswith("Expected 2, got 1")
    with pytest.raises(InvalidArgument) as excinfo:
        array_from_raw("INPUT0", "BF16", [2], bytes(8))
    assert _message(excinfo).endswith("Expected 4, got 8")


def test_the_shape_is_checked_before_the_data() -> None:
    with pytest.raises(InvalidArgument, match="All input dimensions should be specified"):
        array_from_raw("INPUT0", "FP32", [-1], bytes(4))
    with pytest.raises(InvalidArgument, match="too large for any tensor"):
        array_from_raw("INPUT0", "BYTES", [2**62, 2**62], _le(0))


def test_more_bytes_elements_than_the_shape_are_refused() -> None:
    with pytest.raises(InvalidArgument) as excinfo:
        array_from_raw("INPUT0", "BYTES", [1, 1], _le(1, b"a", 1, b"b"), "identity_bytes", "r1")
    assert _message(excinfo) == (
        "[request id: r1] unexpected number of string elements 2 for inference input 'INPUT0' for model "
        "'identity_bytes', expecting 1"
    )


def test_fewer_bytes_elements_than_the_shape_are_refused() -> None:
    with pytest.raises(InvalidArgument) as excinfo:
        array_from_raw("INPUT0", "BYTES", [1, 2], _le(1, b"a"), "identity_bytes", "r1")
    assert _message(excinfo) == (
        "[request id: r1] expected 2 string elements for inference input 'INPUT0' for model "
        "'identity_bytes', got 1"
    )


def test_bytes_elements_are_counted_from_the_data_not_the_shape() -> None:
    """A shape claiming 2**40 elements allocates nothing: the data holds one (once an attempt at 8 TiB)."""
    with pytest.raises(InvalidArgument) as excinfo:
        array_from_raw("INPUT0", "BYTES", [1, 2**40], _le(0), "m")
    assert _message(excinfo) == (
        "[request id: <id_unknown>] expected 1099511627776 string elements for inference input 'INPUT0' for "
        "model 'm', got 1"
    )
    with pytest.raises(InvalidArgument) as excinfo:
        array_from_raw("INPUT0", "BYTES", [1], b"", "m")
    assert _message(excinfo).endswith(
        "expected 1 string elements for inference input 'INPUT0' for model 'm', got 0"
    )


@pytest.mark.parametrize("prefix", [b"\x05", b"\x05\x00", b"\x05\x00\x00"])
def test_a_truncated_length_prefix_is_refused(prefix: bytes) -> None:
    with pytest.raises(InvalidArgument) as excinfo:
        deserialize_bytes("INPUT0", _le(1, b"a") + prefix, 2, "identity_bytes", "r1")
    assert _message(excinfo) == (
        "[request id: r1] incomplete string length indicator for inference input 'INPUT0' for model "
        f"'identity_bytes', expecting 4 bytes but only {len(prefix)} bytes available. Please make sure the "
        "string length indicator is in one buffer."
    )


def test_a_truncated_element_is_refused_without_the_request_id() -> None:
    """Triton's own wording of this one names neither the request nor the model."""
    with pytest.raises(InvalidArgument) as excinfo:
        deserialize_bytes("INPUT0", _le(5, b"ab"), 1, "identity_bytes", "r1")
    assert _message(excinfo) == (
        "incomplete string data for inference input 'INPUT0', expecting string of length 5 but only 2 bytes "
        "available"
    )


def test_a_length_prefix_claiming_gigabytes_is_refused_without_allocating() -> None:
    with pytest.raises(InvalidArgument) as excinfo:
        deserialize_bytes("INPUT0", _le(0xFFFFFFFF, b"a"), 1)
    assert _message(excinfo).endswith("expecting string of length 4294967295 but only 1 bytes available")
