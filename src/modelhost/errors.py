"""The one exception tree of modelhost, each class mapped once to an HTTP status and a gRPC code.

    ModelhostError                (400, INVALID_ARGUMENT)  base; also "unknown" errors from clients
    ├── InvalidArgument           (400, INVALID_ARGUMENT)  malformed or inconsistent requests
    │   ├── ModelConfigError      (400, INVALID_ARGUMENT)  an invalid config.pbtxt or override
    │   └── BackendInvalidArgument (400, INVALID_ARGUMENT) a request the backend runtime refused
    ├── NotFound                  (404, NOT_FOUND)         unknown model, version, input, output
    ├── Unavailable               (503, UNAVAILABLE)       model not ready, shutting down
    │   └── Rejected              (503, UNAVAILABLE)       queue full, timed out while queued
    ├── Unsupported               (501, UNIMPLEMENTED)     features not offered for this model or server
    ├── AlreadyExists             (400, ALREADY_EXISTS)
    ├── Cancelled                 (400, CANCELLED)
    ├── OutOfMemory               (507, RESOURCE_EXHAUSTED) a load that does not fit in memory or the budget
    ├── UnsupportedMediaType      (415, INVALID_ARGUMENT)  unknown Content-Encoding
    └── InternalError             (500, INTERNAL)          a fault of the server or the backend runtime

Messages follow Triton's wording where clients and tests match on it.
"""

from __future__ import annotations

import logging

import grpc


class ModelhostError(Exception):
    http_status: int = 400
    grpc_code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT
    # The `reason` label of nv_inference_request_failure when a request fails with this error.
    failure_reason: str = "OTHER"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidArgument(ModelhostError):
    pass


class ModelConfigError(InvalidArgument):
    pass


class BackendInvalidArgument(InvalidArgument):
    """A request the backend's runtime refused while executing it (a shape or value the model cannot take):
    400, counted as failure reason BACKEND as Triton counts every error that comes out of a backend."""

    failure_reason = "BACKEND"


class NotFound(ModelhostError):
    http_status = 404
    grpc_code = grpc.StatusCode.NOT_FOUND


class Unavailable(ModelhostError):
    http_status = 503
    grpc_code = grpc.StatusCode.UNAVAILABLE


class Rejected(Unavailable):
    failure_reason = "REJECTED"


class Unsupported(ModelhostError):
    http_status = 501
    grpc_code = grpc.StatusCode.UNIMPLEMENTED


class DecoupledModel(Unsupported):
    """A decoupled model asked for one response. Triton's HTTP wording by default; gRPC ModelInfer rewords it."""

    http_message = "HTTP end point doesn't support models with decoupled transaction policy"
    grpc_message = "ModelInfer RPC doesn't support models with decoupled transaction policy"

    def __init__(self, message: str = http_message) -> None:
        super().__init__(message)


class AlreadyExists(ModelhostError):
    grpc_code = grpc.StatusCode.ALREADY_EXISTS


class Cancelled(ModelhostError):
    grpc_code = grpc.StatusCode.CANCELLED
    failure_reason = (
        "CANCELED"  # a request failed because its sequence was cancelled counts so too, as in Triton
    )


class OutOfMemory(ModelhostError):
    """A model load that does not fit: past --model-memory-budget once idle models are unloaded, or the runtime
    (or the kernel's OOM killer) ran out of memory. 507, as Triton's SageMaker listener answers it."""

    http_status = 507
    grpc_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class UnsupportedMediaType(ModelhostError):
    http_status = 415


class InternalError(ModelhostError):
    http_status = 500
    grpc_code = grpc.StatusCode.INTERNAL
    failure_reason = "BACKEND"


class UnknownError(ModelhostError):
    """A backend's error of Triton's UNKNOWN code (pb_utils.TritonError.UNKNOWN): gRPC UNKNOWN and, as
    Triton's HTTP server has no better match for it, 400."""

    grpc_code = grpc.StatusCode.UNKNOWN
    failure_reason = "BACKEND"


def request_failure_level(e: ModelhostError) -> int:
    """The level a failed request is logged at, the same for every endpoint and feature: ERROR only for a fault
    of the server itself (500); INFO for what the client asked wrongly or what this server does not offer or
    cannot do now (4xx, 501, 503, 507): the client gets the reason in its answer, and a flood of such requests
    must not fill the error log."""
    return logging.ERROR if e.http_status == 500 else logging.INFO


__all__ = [
    "AlreadyExists",
    "BackendInvalidArgument",
    "Cancelled",
    "DecoupledModel",
    "InternalError",
    "InvalidArgument",
    "ModelConfigError",
    "ModelhostError",
    "NotFound",
    "OutOfMemory",
    "Rejected",
    "Unavailable",
    "UnknownError",
    "Unsupported",
    "UnsupportedMediaType",
    "request_failure_level",
]
