"""How the `modelhost` command refuses a command line: CliError, which main() prints as one line and ends with
exit code 2, and the argparse parser whose errors are CliErrors."""

from __future__ import annotations

import argparse
from typing import NoReturn

USAGE_ERROR = 2  # bad command line, as argparse and most CLIs


class CliError(Exception):
    """A command line modelhost refuses; main() prints it and exits with USAGE_ERROR."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class CliParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise CliError(message)
