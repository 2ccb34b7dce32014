"""Logging in tritonserver's line format, on the stdlib `modelhost` logger hierarchy.

    I1122 01:51:34.123456 4242 server.py:87] "Started HTTPService at 0.0.0.0:8000"      (--log-format=default)
    2026-11-22T01:51:34Z I 4242 server.py:87] "Started HTTPService at 0.0.0.0:8000"     (--log-format=ISO8601)

As tritonserver (2.5x): times are UTC, the message is quoted and escaped so that one record is one line (unless
TRITON_SERVER_ESCAPE_LOG_MESSAGES=0: then it is written as it is), and verbose messages carry the letter I. A
message that starts with a newline is written as it is: that is how tritonserver logs its startup tables
(`log.info("\\n%s", log_table(...))`).

Levels, each switched on its own as tritonserver does (--log-error=false hides errors but keeps info):
ERROR and above <- --log-error, WARNING <- --log-warning, INFO <- --log-info, DEBUG <- --log-verbose >= 1.
Levels below DEBUG are deeper verbose levels: DEBUG - 1 needs --log-verbose >= 2, and so on.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence

from modelhost.options.log import LogOptions

LOGGER_NAME = "modelhost"


def _verbose_level(levelno: int) -> int:
    """The --log-verbose level a record below INFO needs: 1 for DEBUG (and 11..19), 2 for DEBUG - 1, ..."""
    return max(1, logging.DEBUG - levelno + 1)


# tritonserver's switch: messages are quoted and escaped unless this is "0".
ESCAPE_VARIABLE = "TRITON_SERVER_ESCAPE_LOG_MESSAGES"


def escape_messages(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(ESCAPE_VARIABLE) != "0"


class TritonFormatter(logging.Formatter):
    def __init__(self, iso8601: bool = False, escape: bool = True) -> None:
        super().__init__()
        self.iso8601 = iso8601
        self.escape = escape

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message = f"{message}\n{self.formatException(record.exc_info)}"
        prefix = f"{self._stamp(record)} {record.process} {record.filename}:{record.lineno}]"
        if message.startswith("\n"):  # a table; the blank line after it is tritonserver's too
            return f"{prefix} {message}\n"
        if not self.escape:
            return f"{prefix} {message}"
        return f"{prefix} {json.dumps(message, ensure_ascii=False)}"

    def _stamp(self, record: logging.LogRecord) -> str:
        letter = _letter(record.levelno)
        micros = int(record.created * 1_000_000)
        utc = time.gmtime(micros // 1_000_000)
        if self.iso8601:
            return f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', utc)} {letter}"
        return f"{letter}{time.strftime('%m%d %H:%M:%S', utc)}.{micros % 1_000_000:06d}"


def _letter(levelno: int) -> str:
    if levelno >= logging.ERROR:
        return "E"
    if levelno >= logging.WARNING:
        return "W"
    return "I"  # tritonserver writes verbose messages with I too


class LevelFilter(logging.Filter):
    """tritonserver's switches: each severity on or off by itself, verbose by level."""

    def __init__(self, options: LogOptions) -> None:
        super().__init__()
        self.verbose = options.verbose
        self.info = options.info
        self.warning = options.warning
        self.error = options.error

    def filter(self, record: logging.LogRecord) -> bool:
        levelno = record.levelno
        if levelno >= logging.ERROR:
            return self.error
        if levelno >= logging.WARNING:
            return self.warning
        if levelno >= logging.INFO:
            return self.info
        return self.verbose >= _verbose_level(levelno)

    def lowest_level(self) -> int:
        """The logger level that lets through every record this filter may pass, and no more."""
        if self.verbose > 0:
            return max(1, logging.DEBUG - (self.verbose - 1))
        for enabled, level in ((self.info, logging.INFO), (self.warning, logging.WARNING)):
            if enabled:
                return level
        return logging.ERROR if self.error else logging.CRITICAL + 1


def configure_logging(options: LogOptions) -> None:
    """Send the `modelhost` logger hierarchy to --log-file (appending) or stderr, in tritonserver's format.

    Calling it again replaces what an earlier call installed (the logging API may change the settings at run
    time that way). Raises OSError when the log file cannot be opened.
    """
    handler: logging.Handler
    if options.file:
        handler = logging.FileHandler(options.file, mode="a", encoding="utf-8")
    else:
        handler = logging.StreamHandler(sys.stderr)
    level_filter = LevelFilter(options)
    handler.addFilter(level_filter)
    handler.setFormatter(TritonFormatter(iso8601=options.format == "ISO8601", escape=escape_messages()))
    handler.set_name(_HANDLER_NAME)

    logger = logging.getLogger(LOGGER_NAME)
    for old in [h for h in logger.handlers if h.get_name() == _HANDLER_NAME]:
        logger.removeHandler(old)
        old.close()
    logger.addHandler(handler)
    # The logger level is the cheap first gate (a disabled logger.debug() builds no record); the filter then
    # applies the switches a single threshold cannot express.
    logger.setLevel(level_filter.lowest_level())
    # Our lines are complete; the root logger's handlers (if any) would print them a second time.
    logger.propagate = False


_HANDLER_NAME = "modelhost-triton-format"


def log_table(title_columns: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """An ASCII table like tritonserver's startup tables (Model | Version | Status, Option | Value).

    Cells are str()-ed; a cell with newlines spans several lines of its row. Log it on the line after the
    prefix, as tritonserver does: `log.info("\\n%s", log_table(...))`.
    """
    header = [str(title) for title in title_columns]
    body = [[str(cell) for cell in row] for row in rows]
    for row in body:
        if len(row) != len(header):
            raise ValueError(f"table row has {len(row)} cells, expected {len(header)}: {row}")
    widths = [len(title) for title in header]
    for row in body:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], *(len(line) for line in cell.split("\n")))
    border = "+" + "+".join("-" * (width + 2) for width in widths) + "+"
    lines = [border, *_row_lines(header, widths), border]
    for row in body:
        lines.extend(_row_lines(row, widths))
    lines.append(border)
    return "\n".join(lines)


def _row_lines(cells: Sequence[str], widths: Sequence[int]) -> list[str]:
    split = [cell.split("\n") for cell in cells]
    height = max((len(parts) for parts in split), default=1)
    lines = []
    for n in range(height):
        parts = [
            (cell[n] if n < len(cell) else "").ljust(width) for cell, width in zip(split, widths, strict=True)
        ]
        lines.append("| " + " | ".join(parts) + " |")
    return lines


class RateLimitedLog:
    """One log line a second at most for a refusal that a flood repeats (each would be one line otherwise)."""

    def __init__(self) -> None:
        self.last = 0.0
        self.count = 0

    def note(self, logger: logging.Logger, why: str) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self.last >= 1.0:
            logger.warning("refused %d new connection(s): %s", self.count, why)
            self.last, self.count = now, 0
