"""The RPCs the gRPC server answers, by path: how to decode a request, which handler runs, how to encode."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import descriptor as _descriptor  # type: ignore[import-untyped]
from google.protobuf import message_factory

from modelhost.frontends.grpc.calls import AbortError


@dataclass(frozen=True, slots=True)
class Method:
    name: str
    # True for a call whose client sends a stream of messages and is answered with a stream (ModelStreamInfer).
    streaming: bool
    decode: Callable[[bytes], Any]
    # unary: `async (request, context) -> response`; streaming: `(request_iterator, context) -> async iterator`.
    handler: Callable[..., Any]
    encode: Callable[[Any], bytes]


def methods_of(
    service: _descriptor.ServiceDescriptor, servicer: object, prefix: str = ""
) -> dict[bytes, Method]:
    """`/package.Service/Method` -> Method for each method `servicer` implements (the others are unknown).

    `prefix`: only the methods whose names start with it, each answered by the servicer's method named for the
    rest (`SharedMemoryStatus` serves `CudaSharedMemoryStatus` under the prefix "Cuda")."""
    table: dict[bytes, Method] = {}
    for method in service.methods:
        if not method.name.startswith(prefix):
            continue
        handler = getattr(servicer, method.name[len(prefix) :], None)
        if handler is None:
            continue
        if method.client_streaming and not method.server_streaming:
            raise ValueError(f"{method.full_name}: client-streaming calls are not served")
        if method.server_streaming and not method.client_streaming:
            handler = _one_request(handler)  # served as a streaming call that reads one message
        request_class = message_factory.GetMessageClass(method.input_type)
        table[f"/{service.full_name}/{method.name}".encode()] = Method(
            name=method.name,
            streaming=method.server_streaming,
            decode=request_class.FromString,
            handler=handler,
            encode=_serialize,
        )
    return table


def _one_request(handler: Callable[[Any, Any], AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
    """A server-streaming handler `(request, context) -> async iterator` as a streaming one: the client sends
    exactly one message (grpcio's unary-stream calls), read before the handler starts."""

    async def stream(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        async for request in requests:
            async for response in handler(request, context):
                yield response
            return
        raise AbortError(grpc.StatusCode.INVALID_ARGUMENT, "the call sent no request message")

    return stream


def _serialize(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return data
