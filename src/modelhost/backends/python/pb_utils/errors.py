"""pb_utils' errors: TritonModelException, which this API raises where Triton's raises, and TritonError, the
error an InferenceResponse carries."""

from __future__ import annotations

import enum
from typing import ClassVar


class TritonModelException(Exception):
    """Raised by this API where Triton raises; a model may raise it from initialize/execute/finalize."""

    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class _ErrorCode(enum.IntEnum):
    """TRITONSERVER_Error_Code: TritonError.code() returns one, TritonError.INTERNAL and the others are these."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7


class TritonError:
    """An error to put in an InferenceResponse: `TritonError(message, code=TritonError.INTERNAL)`."""

    UNKNOWN: ClassVar[_ErrorCode] = _ErrorCode.UNKNOWN
    INTERNAL: ClassVar[_ErrorCode] = _ErrorCode.INTERNAL
    NOT_FOUND: ClassVar[_ErrorCode] = _ErrorCode.NOT_FOUND
    INVALID_ARG: ClassVar[_ErrorCode] = _ErrorCode.INVALID_ARG
    UNAVAILABLE: ClassVar[_ErrorCode] = _ErrorCode.UNAVAILABLE
    UNSUPPORTED: ClassVar[_ErrorCode] = _ErrorCode.UNSUPPORTED
    ALREADY_EXISTS: ClassVar[_ErrorCode] = _ErrorCode.ALREADY_EXISTS
    CANCELLED: ClassVar[_ErrorCode] = _ErrorCode.CANCELLED

    def __init__(self, message: str, code: int = _ErrorCode.INTERNAL) -> None:
        if not isinstance(message, str):
            raise TypeError(f"TritonError(): message must be a str, not {type(message).__name__}")
        # Triton takes only the enum; plain ints are accepted too, because the stub rebuilds errors from the wire.
        if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code < len(_ErrorCode):
            raise TypeError(f"TritonError(): code must be one of TritonError's codes, not {code!r}")
        self._message = message
        self._code = _ErrorCode(code)

    def message(self) -> str:
        return self._message

    def code(self) -> _ErrorCode:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, TritonError.{self._code.name})"
