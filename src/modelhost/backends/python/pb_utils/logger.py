"""pb_utils.Logger: log to the server's log, with the model's file and line; to stderr in Triton's format without a
runtime."""

from __future__ import annotations

import enum
import os
import sys
import time
from types import FrameType
from typing import ClassVar

from modelhost.backends.python.pb_utils.runtime import installed_runtime


class _LogLevel(enum.IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


_LEADING_CHAR = {_LogLevel.INFO: "I", _LogLevel.WARNING: "W", _LogLevel.ERROR: "E", _LogLevel.VERBOSE: "I"}


def _caller() -> tuple[str, int]:
    """The model's file and line that called the Logger: the first frame outside this module."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_globals is globals():
        frame = frame.f_back
    if frame is None:
        return ("<unknown>", 0)
    return (frame.f_code.co_filename, frame.f_lineno or 0)


class Logger:
    """Log to the server's log: `pb_utils.Logger.log_info("...")`, or `Logger.log(message, Logger.WARNING)`."""

    LogLevel: ClassVar[type[_LogLevel]] = _LogLevel
    INFO: ClassVar[_LogLevel] = _LogLevel.INFO
    WARNING: ClassVar[_LogLevel] = _LogLevel.WARNING
    ERROR: ClassVar[_LogLevel] = _LogLevel.ERROR
    VERBOSE: ClassVar[_LogLevel] = _LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: _LogLevel = _LogLevel.INFO) -> None:
        if not isinstance(message, str):
            raise TypeError(f"log(): message must be a str, not {type(message).__name__}")
        if not isinstance(level, _LogLevel):
            raise TypeError(f"log(): level must be a pb_utils.Logger.LogLevel, not {level!r}")
        filename, line = _caller()
        runtime = installed_runtime()
        if runtime is not None:
            runtime.log(level.name, message, filename, line)
            return
        # No server to log to: Triton's own line format on stderr, as its stub does before logging is up.
        now = time.time()
        stamp = time.strftime("%m%d %H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1_000_000):06d}"
        print(
            f"{_LEADING_CHAR[level]}{stamp} {os.getpid()} {os.path.basename(filename)}:{line}]  {message}",
            file=sys.stderr,
            flush=True,
        )

    @staticmethod
    def log_info(message: str) -> None:
        Logger.log(message, _LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        Logger.log(message, _LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        Logger.log(message, _LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        Logger.log(message, _LogLevel.VERBOSE)
