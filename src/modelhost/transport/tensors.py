"""Tensors on the link: raw bytes out of a numpy array, and a numpy array over received bytes (no copy)."""

from __future__ import annotations

import numpy as np

from modelhost.tensor_codec import array_from_raw, serialize_bytes
from modelhost.transport.messages import WireTensor
from modelhost.types import Tensor


def to_wire(tensor: Tensor) -> WireTensor:
    if tensor.datatype == "BYTES":
        data = memoryview(serialize_bytes(tensor.data))
    else:
        data = np.ascontiguousarray(tensor.data).reshape(-1).view(np.uint8).data
    return WireTensor(tensor.name, tensor.datatype, list(tensor.shape), data, tensor.parameters)


def from_wire(wire: WireTensor, model: str = "", request_id: str = "") -> Tensor:
    data = array_from_raw(wire.name, wire.datatype, wire.shape, wire.data, model, request_id)
    return Tensor(wire.name, wire.datatype, wire.shape, data, wire.parameters)
