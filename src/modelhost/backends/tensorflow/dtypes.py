"""TensorFlow data types under their config names (Triton's TF backend ConvertDataType).

Keyed by the DataType enum names of TensorFlow's types.proto ("DT_FLOAT"), so that this table needs no TensorFlow.
Triton's TF backend has no BF16 (nor complex, resource, variant, quantized) tensors at a model's inputs or
outputs, and neither have we: a signature using one is refused at load.
"""

from __future__ import annotations

from typing import Final

TF_TO_CONFIG: Final[dict[str, str]] = {
    "DT_BOOL": "TYPE_BOOL",
    "DT_UINT8": "TYPE_UINT8",
    "DT_UINT16": "TYPE_UINT16",
    "DT_UINT32": "TYPE_UINT32",
    "DT_UINT64": "TYPE_UINT64",
    "DT_INT8": "TYPE_INT8",
    "DT_INT16": "TYPE_INT16",
    "DT_INT32": "TYPE_INT32",
    "DT_INT64": "TYPE_INT64",
    "DT_HALF": "TYPE_FP16",
    "DT_FLOAT": "TYPE_FP32",
    "DT_DOUBLE": "TYPE_FP64",
    "DT_STRING": "TYPE_STRING",
}

__all__ = ["TF_TO_CONFIG"]
