"""What the commands `modelhost perf` and `modelhost tune` share: main()'s frame (argparse's exit, the run, a
failed run as one line on stderr, Ctrl-C) and the argparse types of their numbers.

tune builds on perf's load engine, so it takes these from here.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

ERROR = 1  # a run that failed: dead server, unknown model, failed requests, no configuration found
INTERRUPTED = 130  # 128 + SIGINT, as shells report it

Options = TypeVar("Options")
Number = TypeVar("Number", int, float)


def run_command(
    prog: str,
    argv: Sequence[str],
    parse: Callable[[Sequence[str]], Options],
    run: Callable[[Options], int],
    failure: type[Exception],
    interrupted: str = "",
) -> int:
    """`prog ARGV`: bad flags exit with argparse's code 2 and message; a `failure` (the command's own error)
    ends the run with `prog: error: <message>` after what the run printed, exit 1; Ctrl-C exits 130, saying
    `prog: <interrupted>` where given."""
    try:
        options = parse(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 0
    try:
        return run(options)
    except failure as error:
        sys.stdout.flush()
        print(f"{prog}: error: {error}", file=sys.stderr)
        return ERROR
    except KeyboardInterrupt:
        if interrupted:
            print(f"{prog}: {interrupted}", file=sys.stderr)
        return INTERRUPTED


def _checked(
    text: str, convert: Callable[[str], Number], kind: str, accept: Callable[[Number], bool], requirement: str
) -> Number:
    """`text` as a number of `kind`, refused in argparse's way (its message after the flag) unless `accept`."""
    try:
        value = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid {kind}: {text!r}") from None
    if not accept(value):
        raise argparse.ArgumentTypeError(f"{requirement}: {text!r}")
    return value


def positive_int(text: str) -> int:
    return _checked(text, int, "integer", lambda value: value >= 1, "must be at least 1")


def non_negative_float(text: str) -> float:
    """0 or more; infinity passes (no bound), NaN does not."""
    return _checked(text, float, "number", lambda value: value >= 0, "must not be negative")


def positive_float(text: str) -> float:
    """More than 0 and finite."""
    return _checked(text, float, "number", lambda value: 0 < value < math.inf, "must be a positive number")
