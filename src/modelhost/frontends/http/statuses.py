"""The HTTP status of each kind of error (errors.py), as Triton's HTTP server answers them where it has one."""

from __future__ import annotations

from modelhost.errors import ErrorKind, ModelhostError

HTTP_STATUS: dict[ErrorKind, int] = {
    ErrorKind.INVALID_ARGUMENT: 400,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.UNSUPPORTED: 501,
    ErrorKind.ALREADY_EXISTS: 400,  # Triton's HTTP server has no 409 for it
    ErrorKind.CONFLICT: 409,
    ErrorKind.CANCELLED: 400,
    ErrorKind.OUT_OF_MEMORY: 507,  # as Triton's SageMaker listener answers a load that does not fit
    ErrorKind.UNSUPPORTED_MEDIA_TYPE: 415,
    ErrorKind.INTERNAL: 500,
    ErrorKind.UNKNOWN: 400,  # Triton's HTTP server has no better match for it
}


def http_status(e: ModelhostError) -> int:
    return HTTP_STATUS[e.kind]


__all__ = ["HTTP_STATUS", "http_status"]
