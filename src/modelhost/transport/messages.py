"""The messages between a frontend process and the engine, as msgspec structs encoded with msgpack.

Two kinds of call: `InferCall`, an inference request the frontend has already decoded (tensors as raw bytes), and
`HttpCall`, any other HTTP request, forwarded as received and answered by the engine's own HTTP routes, so that
every endpoint and extension behaves exactly as in the single-process server. Tensor bytes decode as memoryviews
over the received frame: the engine builds its numpy arrays over them without a copy.
"""

from __future__ import annotations

import msgspec

# The values a KServe parameter may hold (modelhost.types.ParamValue).
ParamValue = bool | int | float | str


class WireTensor(msgspec.Struct, array_like=True):
    name: str
    datatype: str
    shape: list[int]
    # Raw tensor bytes: little-endian elements, or KServe's length-prefixed strings for BYTES.
    data: memoryview
    parameters: dict[str, ParamValue] = {}


class WireOutput(msgspec.Struct, array_like=True):
    name: str
    parameters: dict[str, ParamValue] = {}


class Hello(msgspec.Struct, tag=1, array_like=True):
    """A frontend's first message, once its sockets listen."""

    index: int
    pid: int


class InferCall(msgspec.Struct, tag=2, array_like=True):
    call: int
    path: str  # for the verbose log line, as the single-process server writes it
    model: str
    version: str
    request_id: str
    inputs: list[WireTensor]
    outputs: list[WireOutput]
    parameters: dict[str, ParamValue]
    priority: int
    timeout_us: int
    received_ns: int  # CLOCK_MONOTONIC, the same clock in every process: the trace's HTTP_RECV_START
    traceparent: str


class HttpCall(msgspec.Struct, tag=3, array_like=True):
    call: int
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: memoryview
    too_large: bool
    received_ns: int


class InferReply(msgspec.Struct, tag=4, array_like=True):
    call: int
    model_name: str
    model_version: str
    request_id: str
    outputs: list[WireTensor]
    parameters: dict[str, ParamValue]


class HttpReply(msgspec.Struct, tag=5, array_like=True):
    call: int
    status: int
    body: memoryview
    content_type: str
    headers: list[tuple[str, str]]


class Refused(msgspec.Struct, tag=6, array_like=True):
    """An inference request the frontend refused itself (503, its buffer full): the engine counts it."""

    model: str
    version: str


FrontendMessage = Hello | InferCall | HttpCall | Refused
EngineMessage = InferReply | HttpReply
