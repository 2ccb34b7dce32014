"""A failure as it crosses Ray: a replica returns a `Failure` instead of raising, and the caller (the ingress, or
an ensemble's replica calling another deployment) turns it back into the same `ModelhostError`, so clients get
the wording and status a single server gives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modelhost.errors import InternalError, ModelhostError, error_from


@dataclass(frozen=True)
class Failure:
    """A ModelhostError, as it crosses Ray: its kind, class name and message (modelhost.errors.error_from)."""

    kind: str
    name: str
    message: str

    @staticmethod
    def of(error: BaseException) -> Failure:
        if isinstance(error, ModelhostError):
            return Failure(error.kind.value, type(error).__name__, str(error))
        internal = InternalError(f"{type(error).__name__}: {error}")
        return Failure(internal.kind.value, "InternalError", str(internal))


def unwrapped(answer: Any) -> Any:
    """A replica's answer, its Failure raised as the error it stands for."""
    if isinstance(answer, Failure):
        raise error_from(answer.kind, answer.name, answer.message)
    return answer


def ray_reason(error: BaseException) -> str:
    """Ray's error, in one line (its messages carry whole tracebacks)."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"
