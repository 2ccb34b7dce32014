"""pb_utils.Tensor: data types, no copies of contiguous arrays, DLPack."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from modelhost.backends.python import pb_utils


@pytest.mark.parametrize(
    ("dtype", "code"),
    [
        (np.bool_, 1),
        (np.uint8, 2),
        (np.uint16, 3),
        (np.uint32, 4),
        (np.uint64, 5),
        (np.int8, 6),
        (np.int16, 7),
        (np.int32, 8),
        (np.int64, 9),
        (np.float16, 10),
        (np.float32, 11),
        (np.float64, 12),
        (np.object_, 13),
        ("S3", 13),
    ],
)
def test_tensor_dtypes(dtype: Any, code: int) -> None:
    tensor = pb_utils.Tensor("t", np.zeros((2, 3), dtype=dtype))
    assert tensor.triton_dtype() == code
    assert tensor.shape() == [2, 3]
    assert tensor.name() == "t"
    assert tensor.is_cpu() is True


def test_tensor_keeps_contiguous_arrays_and_copies_the_others() -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert pb_utils.Tensor("a", array).as_numpy() is array  # the stub's shared-memory views stay views
    strided = pb_utils.Tensor("b", array.T).as_numpy()
    assert strided.flags.c_contiguous and np.array_equal(strided, array.T)
    assert pb_utils.Tensor("c", [1, 2, 3]).triton_dtype() == 9  # like pybind's py::array, lists are converted


def test_tensor_refuses_what_triton_refuses() -> None:
    with pytest.raises(pb_utils.TritonModelException, match=r"Tensor name cannot be an empty string."):
        pb_utils.Tensor("", np.zeros(1))
    for bad in (np.array(["text"]), np.zeros(2, dtype=np.complex64), np.zeros(1, dtype="datetime64[s]")):
        with pytest.raises(pb_utils.TritonModelException, match=r"NumPy dtype is not supported."):
            pb_utils.Tensor("x", bad)


def test_bytes_tensor() -> None:
    tensor = pb_utils.Tensor("s", np.array([b"a", b"bc"], dtype=np.object_))
    assert tensor.triton_dtype() == 13
    assert tensor.as_numpy().tolist() == [b"a", b"bc"]
    with pytest.raises(
        pb_utils.TritonModelException, match=r"DLPack does not have support for string tensors."
    ):
        tensor.to_dlpack()


def test_dlpack_round_trip_shares_memory() -> None:
    array = np.arange(6, dtype=np.int64).reshape(2, 3)
    tensor = pb_utils.Tensor("x", array)
    from_capsule = pb_utils.Tensor.from_dlpack("y", tensor.to_dlpack())
    assert from_capsule.name() == "y" and from_capsule.triton_dtype() == 9
    assert np.shares_memory(from_capsule.as_numpy(), array)
    from_object = pb_utils.Tensor.from_dlpack("z", array)  # anything with __dlpack__
    assert np.shares_memory(from_object.as_numpy(), array)
    assert np.shares_memory(np.from_dlpack(tensor), array)  # a Tensor is a DLPack producer itself
    readonly = array.copy()
    readonly.flags.writeable = False
    assert np.array_equal(
        pb_utils.Tensor.from_dlpack("r", pb_utils.Tensor("r", readonly).to_dlpack()).as_numpy(), array
    )
    with pytest.raises(pb_utils.TritonModelException, match=r"Tensor name cannot be an empty string."):
        pb_utils.Tensor.from_dlpack("", array)
    with pytest.raises(pb_utils.TritonModelException, match=r"must be a DLPack capsule"):
        pb_utils.Tensor.from_dlpack("x", [1, 2])
    with pytest.raises(pb_utils.TritonModelException, match=r"not contiguous"):
        pb_utils.Tensor.from_dlpack("x", array.T)
