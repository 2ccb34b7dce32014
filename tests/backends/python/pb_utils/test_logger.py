"""pb_utils.Logger: the server's log through the runtime, with the model's call site; stderr without one."""

from __future__ import annotations

import re

import pytest

from backends.python.pb_utils.fake_runtime import FakeRuntime
from modelhost.backends.python import pb_utils


def test_logger_falls_back_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    pb_utils.Logger.log_warn("careful")
    line = capsys.readouterr().err
    assert re.fullmatch(r"W\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ test_logger\.py:\d+\]  careful\n", line), line
    pb_utils.Logger.log("plain")
    assert capsys.readouterr().err.startswith("I")
    pb_utils.Logger.log("bad", pb_utils.Logger.ERROR)
    assert capsys.readouterr().err.startswith("E")


def test_logger_sends_the_models_call_site(runtime: FakeRuntime) -> None:
    pb_utils.Logger.log_info("one")
    pb_utils.Logger.log_error("two")
    pb_utils.Logger.log_verbose("three")
    pb_utils.Logger.log("four", pb_utils.Logger.LogLevel.WARNING)
    assert [(level, message) for level, message, _, _ in runtime.logs] == [
        ("INFO", "one"),
        ("ERROR", "two"),
        ("VERBOSE", "three"),
        ("WARNING", "four"),
    ]
    assert all(filename == __file__ and line > 0 for _, _, filename, line in runtime.logs)
