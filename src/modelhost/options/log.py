"""The --log-* options: what the logs are given (observability/logs.py), and the logging extension changes at
run time (observability/log_settings.py)."""

from __future__ import annotations

from dataclasses import dataclass

LOG_FORMATS = ("default", "ISO8601")


@dataclass(frozen=True, slots=True, kw_only=True)
class LogOptions:
    verbose: int = 0  # --log-verbose: the level of verbose lines (0: none)
    info: bool = True
    warning: bool = True
    error: bool = True
    format: str = "default"  # one of LOG_FORMATS
    file: str | None = None  # None (or ""): stderr
