"""main()'s frame shared by `modelhost perf` and `modelhost tune`, and the argparse types of their numbers."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence

import pytest

from modelhost.perf.command import non_negative_float, positive_float, positive_int, run_command


class Failed(Exception):
    pass


def parse(argv: Sequence[str]) -> list[str]:
    parser = argparse.ArgumentParser(prog="tool")
    parser.add_argument("--count", type=positive_int, default=1)
    parser.parse_args(list(argv))
    return list(argv)


def command(run: Callable[[list[str]], int], argv: Sequence[str] = (), interrupted: str = "") -> int:
    return run_command("modelhost tool", argv, parse, run, Failed, interrupted)


def test_the_run_and_its_exit_code() -> None:
    assert command(lambda argv: 3, ["--count", "2"]) == 3


def test_bad_flags_exit_as_argparse_does(capsys: pytest.CaptureFixture[str]) -> None:
    assert command(lambda argv: 0, ["--count", "0"]) == 2
    assert "tool: error: argument --count: must be at least 1: '0'" in capsys.readouterr().err
    assert command(lambda argv: 0, ["--help"]) == 0


def test_a_failed_run_is_one_line_after_its_output(capsys: pytest.CaptureFixture[str]) -> None:
    def run(argv: list[str]) -> int:
        print("measured")
        raise Failed("the server went away")

    assert command(run) == 1
    out, err = capsys.readouterr()
    assert out == "measured\n" and err == "modelhost tool: error: the server went away\n"


def test_other_errors_are_not_the_commands_to_word() -> None:
    def run(argv: list[str]) -> int:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        command(run)


def test_ctrl_c(capsys: pytest.CaptureFixture[str]) -> None:
    def run(argv: list[str]) -> int:
        raise KeyboardInterrupt

    assert command(run) == 130
    assert capsys.readouterr().err == ""
    assert command(run, interrupted="interrupted; --resume goes on") == 130
    assert capsys.readouterr().err == "modelhost tool: interrupted; --resume goes on\n"


@pytest.mark.parametrize(
    ("convert", "text", "message"),
    [
        (positive_int, "x", "invalid integer: 'x'"),
        (positive_int, "1.5", "invalid integer: '1.5'"),
        (positive_int, "0", "must be at least 1: '0'"),
        (non_negative_float, "x", "invalid number: 'x'"),
        (non_negative_float, "-0.5", "must not be negative: '-0.5'"),
        (non_negative_float, "nan", "must not be negative: 'nan'"),
        (positive_float, "x", "invalid number: 'x'"),
        (positive_float, "0", "must be a positive number: '0'"),
        (positive_float, "inf", "must be a positive number: 'inf'"),
        (positive_float, "nan", "must be a positive number: 'nan'"),
    ],
)
def test_numbers_refused(convert: Callable[[str], float], text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        convert(text)
    assert str(refused.value) == message


def test_numbers_taken() -> None:
    assert positive_int("7") == 7
    assert non_negative_float("0") == 0.0 and non_negative_float("inf") == math.inf
    assert positive_float("0.25") == 0.25
