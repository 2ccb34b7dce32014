"""The HTTP status of each kind of error (errors.py), as Triton's HTTP server answers them where it has one, and
the answer to a failed request."""

from __future__ import annotations

import logging

from modelhost.errors import ErrorKind, ModelhostError, request_failure_level
from modelhost.frontends.http.messages import HttpResponse, error_response

log = logging.getLogger("modelhost.http")

RETRY_AFTER = ("Retry-After", "1")

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


def failure_response(method: str, path: str, e: ModelhostError) -> HttpResponse:
    """The answer to a request that failed with `e`, logged once: as an error when it is the server's fault."""
    log.log(request_failure_level(e), "%s %s failed: %s", method, path, e)
    response = error_response(http_status(e), str(e))
    if e.kind is ErrorKind.UNSUPPORTED_MEDIA_TYPE:
        response.headers.append(("Accept-Encoding", "gzip, deflate"))
    elif e.kind is ErrorKind.UNAVAILABLE:
        # A full queue, a server stopping, a model not ready yet: a client (or a proxy) may try again shortly,
        # here or on another replica.
        response.headers.append(RETRY_AFTER)
    return response


__all__ = ["HTTP_STATUS", "RETRY_AFTER", "failure_response", "http_status"]
