"""The gRPC status code of each kind of error (errors.py), as Triton's gRPC server answers them."""

from __future__ import annotations

import grpc

from modelhost.errors import ErrorKind, ModelhostError

GRPC_CODE: dict[ErrorKind, grpc.StatusCode] = {
    ErrorKind.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorKind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorKind.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorKind.UNSUPPORTED: grpc.StatusCode.UNIMPLEMENTED,
    ErrorKind.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorKind.CONFLICT: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorKind.CANCELLED: grpc.StatusCode.CANCELLED,
    ErrorKind.OUT_OF_MEMORY: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorKind.UNSUPPORTED_MEDIA_TYPE: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorKind.INTERNAL: grpc.StatusCode.INTERNAL,
    ErrorKind.UNKNOWN: grpc.StatusCode.UNKNOWN,
}


def grpc_code(e: ModelhostError) -> grpc.StatusCode:
    return GRPC_CODE[e.kind]


__all__ = ["GRPC_CODE", "grpc_code"]
