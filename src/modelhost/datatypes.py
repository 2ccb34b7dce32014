"""Tensor data types under their three names: KServe wire names, ModelConfig enums, numpy dtypes.

BYTES tensors are numpy object arrays of `bytes`. BF16 has no numpy dtype: it travels as raw 2-byte words
(uint16) and is refused by the ONNX backend, which has no numpy representation for it either.
"""

from __future__ import annotations

from typing import Final

import numpy as np

# KServe datatype -> numpy dtype
WIRE_TO_NUMPY: Final[dict[str, np.dtype[np.generic]]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
    "BF16": np.dtype(np.uint16),
}

# Size in bytes of one element on the wire; BYTES is variable (None).
WIRE_ELEMENT_SIZE: Final[dict[str, int | None]] = {
    name: (None if name == "BYTES" else dtype.itemsize) for name, dtype in WIRE_TO_NUMPY.items()
}

# numpy dtype -> KServe datatype (BF16 is never inferred from a numpy dtype)
NUMPY_TO_WIRE: Final[dict[np.dtype[np.generic], str]] = {
    dtype: name for name, dtype in WIRE_TO_NUMPY.items() if name != "BF16"
}

# ModelConfig DataType enum name -> KServe datatype ("TYPE_STRING" is BYTES on the wire)
CONFIG_TO_WIRE: Final[dict[str, str]] = {
    "TYPE_BOOL": "BOOL",
    "TYPE_UINT8": "UINT8",
    "TYPE_UINT16": "UINT16",
    "TYPE_UINT32": "UINT32",
    "TYPE_UINT64": "UINT64",
    "TYPE_INT8": "INT8",
    "TYPE_INT16": "INT16",
    "TYPE_INT32": "INT32",
    "TYPE_INT64": "INT64",
    "TYPE_FP16": "FP16",
    "TYPE_FP32": "FP32",
    "TYPE_FP64": "FP64",
    "TYPE_STRING": "BYTES",
    "TYPE_BF16": "BF16",
}
WIRE_TO_CONFIG: Final[dict[str, str]] = {wire: cfg for cfg, wire in CONFIG_TO_WIRE.items()}

# ONNX Runtime type strings ("tensor(float)") -> ModelConfig DataType enum name
ONNX_TO_CONFIG: Final[dict[str, str]] = {
    "tensor(bool)": "TYPE_BOOL",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(string)": "TYPE_STRING",
    "tensor(bfloat16)": "TYPE_BF16",
}
