"""The messages between a frontend process and the engine, as msgspec structs encoded with msgpack.

They carry `EngineAPI` calls, not any wire protocol: `InferCall` is an inference request the frontend has
decoded (tensors as raw bytes), answered by one `InferReply` or, for a stream, by `InferReply`s ending in
`StreamEnd`; `ApiCall` is any other `EngineAPI` method by name with plain-data arguments, answered by `ApiReply`
(vLLM's utility-call pattern). A failure of either is an `ErrorReply` with the error's kind, class and message.
Tensor bytes decode as memoryviews over the received frame: the engine builds its numpy arrays over them without
a copy.
"""

from __future__ import annotations

from typing import Any

import msgspec

# The values a KServe parameter may hold (modelhost.types.ParamValue).
ParamValue = bool | int | float | str


class WireWindow(msgspec.Struct, array_like=True):
    """A window of a client's shared-memory region (modelhost.types.ShmWindow)."""

    region: str
    offset: int
    byte_size: int


class WireTensor(msgspec.Struct, array_like=True):
    name: str
    datatype: str
    shape: list[int]
    # Raw tensor bytes: little-endian elements, or KServe's length-prefixed strings for BYTES; empty for a tensor
    # in shared memory.
    data: memoryview
    parameters: dict[str, ParamValue] = {}
    shm: WireWindow | None = None


class WireOutput(msgspec.Struct, array_like=True):
    name: str
    parameters: dict[str, ParamValue] = {}
    classification: int = 0
    shm: WireWindow | None = None


# -- from a frontend ------------------------------------------------------------------------------------------


class Hello(msgspec.Struct, tag=1, array_like=True):
    """A frontend's first message, once its sockets listen; over TCP (a Ray replica's link) the first message of
    every connection, carrying the token the service was started with."""

    index: int
    pid: int
    token: str = ""


UNARY = 0
STREAM = 1
CHECK = 2  # EngineAPI.check_request: answered by an ApiReply of None


class InferCall(msgspec.Struct, tag=2, array_like=True):
    call: int
    mode: int  # UNARY, STREAM or CHECK
    model: str
    version: str
    request_id: str
    inputs: list[WireTensor]
    outputs: list[WireOutput]
    parameters: dict[str, ParamValue]
    priority: int
    timeout_us: int
    shared_memory: bool
    # How the frontend received it (EngineAPI.CallContext): empty protocol = no context.
    protocol: str
    received_ns: int  # CLOCK_MONOTONIC, the same clock in every process
    traceparent: str


class ApiCall(msgspec.Struct, tag=3, array_like=True):
    call: int
    method: str
    args: list[Any]
    kwargs: dict[str, Any]


class Cancel(msgspec.Struct, tag=4, array_like=True):
    """The frontend no longer wants the answer to `call` (its client went away, a stream was closed)."""

    call: int


class Refused(msgspec.Struct, tag=5, array_like=True):
    """An inference request the frontend refused itself (503, its buffer full): the engine counts it."""

    model: str
    version: str


# -- from the engine ------------------------------------------------------------------------------------------


class InferReply(msgspec.Struct, tag=6, array_like=True):
    call: int
    model_name: str
    model_version: str
    request_id: str
    outputs: list[WireTensor]
    parameters: dict[str, ParamValue]
    # A stream's error response that the request goes on after: (kind, class name, message).
    error: tuple[str, str, str] | None = None


class StreamEnd(msgspec.Struct, tag=7, array_like=True):
    call: int


class ApiReply(msgspec.Struct, tag=8, array_like=True):
    call: int
    value: Any


class ErrorReply(msgspec.Struct, tag=9, array_like=True):
    call: int
    kind: str
    name: str  # the error's class, where the frontend knows it
    message: str


class LogSettingsChanged(msgspec.Struct, tag=10, array_like=True):
    """The log settings changed (the logging extension): every frontend applies the same changes."""

    changes: dict[str, Any]


FrontendMessage = Hello | InferCall | ApiCall | Cancel | Refused
EngineMessage = InferReply | StreamEnd | ApiReply | ErrorReply | LogSettingsChanged
