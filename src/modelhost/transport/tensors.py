"""Requests, responses and tensors on the link: raw bytes out of a numpy array, a numpy array over received bytes
(no copy), shared-memory windows as they are."""

from __future__ import annotations

import numpy as np

from modelhost.tensor_codec import array_from_raw, serialize_bytes
from modelhost.transport.messages import InferCall, InferReply, WireOutput, WireTensor, WireWindow
from modelhost.types import InferenceRequest, InferenceResponse, RequestedOutput, ShmWindow, Tensor

_EMPTY = memoryview(b"")
_UNREAD = np.empty(0, dtype=np.uint8)


def _window(shm: ShmWindow | None) -> WireWindow | None:
    return None if shm is None else WireWindow(shm.region, shm.offset, shm.byte_size)


def _shm(wire: WireWindow | None) -> ShmWindow | None:
    return None if wire is None else ShmWindow(wire.region, wire.offset, wire.byte_size)


def to_wire(tensor: Tensor) -> WireTensor:
    """A tensor's bytes; none for one in shared memory (the engine reads an input there, and has written an
    output there)."""
    if tensor.shm is not None:
        data = _EMPTY
    elif tensor.datatype == "BYTES":
        data = memoryview(serialize_bytes(tensor.data))
    else:
        data = np.ascontiguousarray(tensor.data).reshape(-1).view(np.uint8).data
    return WireTensor(
        tensor.name, tensor.datatype, list(tensor.shape), data, tensor.parameters, _window(tensor.shm)
    )


def from_wire(wire: WireTensor, model: str = "", request_id: str = "") -> Tensor:
    if wire.shm is not None:
        return Tensor(wire.name, wire.datatype, wire.shape, _UNREAD, wire.parameters, _shm(wire.shm))
    data = array_from_raw(wire.name, wire.datatype, wire.shape, wire.data, model, request_id)
    return Tensor(wire.name, wire.datatype, wire.shape, data, wire.parameters)


def call_of(
    call: int, mode: int, request: InferenceRequest, protocol: str, received_ns: int, traceparent: str
) -> InferCall:
    return InferCall(
        call,
        mode,
        request.model_name,
        request.model_version,
        request.id,
        [to_wire(t) for t in request.inputs],
        [WireOutput(o.name, o.parameters, o.classification, _window(o.shm)) for o in request.outputs],
        request.parameters,
        request.priority,
        request.timeout_us,
        request.shared_memory,
        protocol,
        received_ns,
        traceparent,
    )


def request_of(call: InferCall) -> InferenceRequest:
    return InferenceRequest(
        model_name=call.model,
        model_version=call.version,
        id=call.request_id,
        inputs=[from_wire(t, call.model, call.request_id) for t in call.inputs],
        outputs=[
            RequestedOutput(o.name, None, o.classification, o.parameters, _shm(o.shm)) for o in call.outputs
        ],
        parameters=call.parameters,
        priority=call.priority,
        timeout_us=call.timeout_us,
        shared_memory=call.shared_memory,
    )


def reply_of(call: int, response: InferenceResponse) -> InferReply:
    return InferReply(
        call,
        response.model_name,
        response.model_version,
        response.id,
        [to_wire(t) for t in response.outputs],
        response.parameters,
    )


def response_of(reply: InferReply) -> InferenceResponse:
    return InferenceResponse(
        reply.model_name,
        reply.model_version,
        reply.request_id,
        [from_wire(t, reply.model_name) for t in reply.outputs],
        reply.parameters,
    )
