"""The one exception tree of modelhost. Each class carries a kind (ErrorKind), which says what went wrong and
nothing about any wire: each frontend maps kinds to its own statuses (frontends/http/statuses.py,
frontends/grpc/statuses.py).

    ModelhostError                INVALID_ARGUMENT  base; also "unknown" errors from clients
    ├── InvalidArgument           INVALID_ARGUMENT  malformed or inconsistent requests
    │   ├── ModelConfigError      INVALID_ARGUMENT  an invalid config.pbtxt or override
    │   └── BackendInvalidArgument INVALID_ARGUMENT a request the backend runtime refused
    ├── NotFound                  NOT_FOUND         unknown model, version, input, output
    ├── Unavailable               UNAVAILABLE       model not ready, shutting down
    │   └── Rejected              UNAVAILABLE       queue full, timed out while queued
    ├── Unsupported               UNSUPPORTED       features not offered for this model or server
    ├── AlreadyExists             ALREADY_EXISTS
    ├── Cancelled                 CANCELLED
    ├── OutOfMemory               OUT_OF_MEMORY     a load that does not fit in memory or the budget
    ├── UnsupportedMediaType      UNSUPPORTED_MEDIA_TYPE  unknown Content-Encoding
    ├── InternalError             INTERNAL          a fault of the server or the backend runtime
    └── UnknownError              UNKNOWN           a backend's error of Triton's UNKNOWN code

Messages follow Triton's wording where clients and tests match on it.
"""

from __future__ import annotations

import enum
import logging


class ErrorKind(enum.StrEnum):
    """What kind of failure an error is, whatever protocol reports it."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    UNAVAILABLE = "UNAVAILABLE"
    UNSUPPORTED = "UNSUPPORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    # The request conflicts with the target's present state and may succeed later (a shared-memory region a
    # request uses, a SageMaker model already loaded).
    CONFLICT = "CONFLICT"
    CANCELLED = "CANCELLED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    UNSUPPORTED_MEDIA_TYPE = "UNSUPPORTED_MEDIA_TYPE"
    INTERNAL = "INTERNAL"
    UNKNOWN = "UNKNOWN"


class ModelhostError(Exception):
    kind: ErrorKind = ErrorKind.INVALID_ARGUMENT
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
    kind = ErrorKind.NOT_FOUND


class Unavailable(ModelhostError):
    kind = ErrorKind.UNAVAILABLE


class Rejected(Unavailable):
    failure_reason = "REJECTED"


class Unsupported(ModelhostError):
    kind = ErrorKind.UNSUPPORTED


class DecoupledModel(Unsupported):
    """A decoupled model asked for one response. Triton's HTTP wording by default; gRPC ModelInfer rewords it."""

    http_message = "HTTP end point doesn't support models with decoupled transaction policy"
    grpc_message = "ModelInfer RPC doesn't support models with decoupled transaction policy"

    def __init__(self, message: str = http_message) -> None:
        super().__init__(message)


class AlreadyExists(ModelhostError):
    kind = ErrorKind.ALREADY_EXISTS


class Conflict(AlreadyExists):
    """A second load of a model name through SageMaker's multi-model API (409, as its contract asks)."""

    kind = ErrorKind.CONFLICT


class Cancelled(ModelhostError):
    kind = ErrorKind.CANCELLED
    failure_reason = (
        "CANCELED"  # a request failed because its sequence was cancelled counts so too, as in Triton
    )


class OutOfMemory(ModelhostError):
    """A model load that does not fit: past --model-memory-budget once idle models are unloaded, or the runtime
    (or the kernel's OOM killer) ran out of memory. 507, as Triton's SageMaker listener answers it."""

    kind = ErrorKind.OUT_OF_MEMORY


class UnsupportedMediaType(ModelhostError):
    kind = ErrorKind.UNSUPPORTED_MEDIA_TYPE


class InternalError(ModelhostError):
    kind = ErrorKind.INTERNAL
    failure_reason = "BACKEND"


class UnknownError(ModelhostError):
    """A backend's error of Triton's UNKNOWN code (pb_utils.TritonError.UNKNOWN): gRPC UNKNOWN and, as
    Triton's HTTP server has no better match for it, 400."""

    kind = ErrorKind.UNKNOWN
    failure_reason = "BACKEND"


def _classes(base: type[ModelhostError]) -> list[type[ModelhostError]]:
    found = [base]
    for sub in base.__subclasses__():
        found += _classes(sub)
    return found


def error_from(kind: str, name: str, message: str) -> ModelhostError:
    """An error received from another process: of its own class where it is one of this tree's (found when
    called, so that subclasses defined elsewhere count), else of the tree's class for its kind."""
    for cls in _classes(ModelhostError):
        if cls.__name__ == name and cls.kind == kind:
            try:
                return cls(message)
            except TypeError:  # a subclass whose constructor takes other arguments
                break
    cls = _BY_KIND.get(kind, ModelhostError)
    return cls(message)


def request_failure_level(e: ModelhostError) -> int:
    """The level a failed request is logged at, the same for every endpoint and feature: ERROR only for a fault
    of the server itself (500); INFO for what the client asked wrongly or what this server does not offer or
    cannot do now (4xx, 501, 503, 507): the client gets the reason in its answer, and a flood of such requests
    must not fill the error log."""
    return logging.ERROR if e.kind is ErrorKind.INTERNAL else logging.INFO


_BY_KIND: dict[str, type[ModelhostError]] = {
    ErrorKind.INVALID_ARGUMENT: InvalidArgument,
    ErrorKind.NOT_FOUND: NotFound,
    ErrorKind.UNAVAILABLE: Unavailable,
    ErrorKind.UNSUPPORTED: Unsupported,
    ErrorKind.ALREADY_EXISTS: AlreadyExists,
    ErrorKind.CONFLICT: Conflict,
    ErrorKind.CANCELLED: Cancelled,
    ErrorKind.OUT_OF_MEMORY: OutOfMemory,
    ErrorKind.UNSUPPORTED_MEDIA_TYPE: UnsupportedMediaType,
    ErrorKind.INTERNAL: InternalError,
    ErrorKind.UNKNOWN: UnknownError,
}

__all__ = [
    "AlreadyExists",
    "BackendInvalidArgument",
    "Cancelled",
    "DecoupledModel",
    "ErrorKind",
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
    "error_from",
    "request_failure_level",
]
