from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

import pytest

from modelhost import errors
from modelhost.observability.logs import (
    LevelFilter,
    TritonFormatter,
    configure_logging,
    escape_messages,
    log_table,
)
from modelhost.options import LogOptions

pytestmark = pytest.mark.usefixtures("restore_logging")

PID = os.getpid()


def record(message: str, level: int = logging.INFO, created: float = 1_000_000_000.5) -> logging.LogRecord:
    made = logging.LogRecord("modelhost.test", level, "/src/modelhost/server.py", 42, message, None, None)
    made.created = created  # 2001-09-09T01:46:40.5Z
    return made


def log_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.splitlines()


# --- Line format


def test_default_format_is_tritonservers() -> None:
    line = TritonFormatter().format(record("Started HTTPService at 0.0.0.0:8000"))
    assert line == f'I0909 01:46:40.500000 {PID} server.py:42] "Started HTTPService at 0.0.0.0:8000"'


def test_iso8601_format_is_tritonservers() -> None:
    line = TritonFormatter(iso8601=True).format(record("Started HTTPService at 0.0.0.0:8000"))
    assert line == f'2001-09-09T01:46:40Z I {PID} server.py:42] "Started HTTPService at 0.0.0.0:8000"'


@pytest.mark.parametrize(
    ("level", "letter"),
    [
        (logging.CRITICAL, "E"),
        (logging.ERROR, "E"),
        (logging.WARNING, "W"),
        (logging.INFO, "I"),
        (logging.DEBUG, "I"),
    ],
)
def test_severity_letters(level: int, letter: str) -> None:
    assert TritonFormatter().format(record("x", level)).startswith(f"{letter}0909 ")
    assert f"Z {letter} " in TritonFormatter(iso8601=True).format(record("x", level))


def test_microseconds_are_zero_padded() -> None:
    line = TritonFormatter().format(record("x", created=1_000_000_000.000_25))
    assert line.startswith("I0909 01:46:40.000250 ")


def test_messages_are_quoted_and_escaped_to_one_line() -> None:
    line = TritonFormatter().format(record("failed to load 'm\"q'\nsecond line \\ done"))
    assert line.endswith(r'] "failed to load ' + "'m" + r"\"q'\nsecond line \\ done" + '"')
    assert "\n" not in line


def test_with_escaping_off_messages_are_written_as_they_are() -> None:
    line = TritonFormatter(escape=False).format(record('failed to load "m"\nsecond line'))
    assert line.endswith('] failed to load "m"\nsecond line')
    assert escape_messages({}) and escape_messages({"TRITON_SERVER_ESCAPE_LOG_MESSAGES": "1"})
    assert not escape_messages({"TRITON_SERVER_ESCAPE_LOG_MESSAGES": "0"})  # only "0", as tritonserver


def test_a_message_starting_with_a_newline_is_a_table_written_as_is() -> None:
    table = log_table(["Model", "Version", "Status"], [["simple", 1, "READY"]])
    line = TritonFormatter().format(record("\n" + table))
    assert line == f"I0909 01:46:40.500000 {PID} server.py:42] \n{table}\n"


def test_exceptions_stay_inside_the_quoted_message() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        failed = record("load failed", logging.ERROR)
        failed.exc_info = sys.exc_info()
    line = TritonFormatter().format(failed)
    assert line.startswith("E0909 ")
    assert '"load failed\\nTraceback' in line
    assert "RuntimeError: boom" in line
    assert "\n" not in line


# --- configure_logging


def test_logs_go_to_stderr_in_the_chosen_format(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(LogOptions())
    logging.getLogger("modelhost.http").info("hello %s", "world")
    (line,) = log_lines(capsys)
    assert re.fullmatch(rf'I\d{{4}} \d\d:\d\d:\d\d\.\d{{6}} {PID} test_logs\.py:\d+\] "hello world"', line)

    configure_logging(LogOptions(format="ISO8601"))
    logging.getLogger("modelhost").warning("careful")
    (line,) = log_lines(capsys)  # reconfiguring replaced the handler: one line, not two
    assert re.fullmatch(rf'\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ W {PID} test_logs\.py:\d+\] "careful"', line)


def test_records_are_not_passed_to_the_root_logger(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(LogOptions())
    assert logging.getLogger("modelhost").propagate is False


def emit_all() -> None:
    logger = logging.getLogger("modelhost.test")
    logger.error("error")
    logger.warning("warning")
    logger.info("info")
    logger.debug("verbose 1")
    logger.log(logging.DEBUG - 1, "verbose 2")


@pytest.mark.parametrize(
    ("options", "shown"),
    [
        (LogOptions(), ["error", "warning", "info"]),
        (LogOptions(verbose=1), ["error", "warning", "info", "verbose 1"]),
        (LogOptions(verbose=2), ["error", "warning", "info", "verbose 1", "verbose 2"]),
        # Each severity is its own switch, as in tritonserver: not a threshold.
        (LogOptions(info=False), ["error", "warning"]),
        (LogOptions(warning=False), ["error", "info"]),
        (LogOptions(error=False), ["warning", "info"]),
        (LogOptions(info=False, warning=False, error=False), []),
        # Verbose messages do not depend on --log-info.
        (LogOptions(info=False, verbose=1), ["error", "warning", "verbose 1"]),
    ],
)
def test_level_switches(options: LogOptions, shown: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(options)
    emit_all()
    assert [line.rsplit("] ", 1)[1].strip('"') for line in log_lines(capsys)] == shown


def test_verbose_messages_carry_the_letter_i(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(LogOptions(verbose=1))
    logging.getLogger("modelhost").debug("detail")
    assert log_lines(capsys)[0].startswith("I")


@pytest.mark.parametrize(
    ("options", "level"),
    [
        (LogOptions(), logging.INFO),
        (LogOptions(info=False), logging.WARNING),
        (LogOptions(info=False, warning=False), logging.ERROR),
        (LogOptions(info=False, warning=False, error=False), logging.CRITICAL + 1),
        (LogOptions(verbose=1), logging.DEBUG),
        (LogOptions(verbose=3), logging.DEBUG - 2),
    ],
)
def test_the_logger_level_lets_no_record_be_built_in_vain(options: LogOptions, level: int) -> None:
    assert LevelFilter(options).lowest_level() == level
    configure_logging(options)
    assert logging.getLogger("modelhost").level == level


def test_log_file_is_appended_to(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_file = tmp_path / "server.log"
    log_file.write_text("earlier\n")
    configure_logging(LogOptions(file=str(log_file)))
    logging.getLogger("modelhost").info("started")
    configure_logging(LogOptions())  # closes the file
    lines = log_file.read_text().splitlines()
    assert lines[0] == "earlier"
    assert lines[1].endswith('] "started"')
    assert len(lines) == 2
    assert capsys.readouterr().err == ""


def test_unopenable_log_file_raises(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        configure_logging(LogOptions(file=str(tmp_path / "missing" / "server.log")))


# --- Tables


def test_table_like_tritonservers() -> None:
    assert log_table(["Model", "Version", "Status"], [["simple", 1, "READY"]]) == "\n".join(
        [
            "+--------+---------+--------+",
            "| Model  | Version | Status |",
            "+--------+---------+--------+",
            "| simple | 1       | READY  |",
            "+--------+---------+--------+",
        ]
    )


def test_empty_table_keeps_its_header() -> None:
    assert log_table(["Repository Agent", "Path"], []) == "\n".join(
        [
            "+------------------+------+",
            "| Repository Agent | Path |",
            "+------------------+------+",
            "+------------------+------+",
        ]
    )


def test_multiline_cell_spans_lines_of_its_row() -> None:
    assert log_table(["Option", "Value"], [["a", "one\nthree"], ["b", ""]]) == "\n".join(
        [
            "+--------+-------+",
            "| Option | Value |",
            "+--------+-------+",
            "| a      | one   |",
            "|        | three |",
            "| b      |       |",
            "+--------+-------+",
        ]
    )


def test_row_of_the_wrong_width_is_refused() -> None:
    with pytest.raises(ValueError, match="2 cells, expected 3"):
        log_table(["Model", "Version", "Status"], [["simple", 1]])


def test_failed_requests_are_errors_only_when_the_server_is_at_fault() -> None:
    client_side = [
        errors.InvalidArgument("x"),
        errors.NotFound("x"),
        errors.Unavailable("x"),
        errors.Rejected("x"),
        errors.Unsupported("x"),  # CUDA shared memory on a host without a GPU, a decoupled model over HTTP
        errors.OutOfMemory("x"),
        errors.UnsupportedMediaType("x"),
        errors.Cancelled("x"),
    ]
    assert {errors.request_failure_level(e) for e in client_side} == {logging.INFO}
    assert errors.request_failure_level(errors.InternalError("x")) == logging.ERROR
