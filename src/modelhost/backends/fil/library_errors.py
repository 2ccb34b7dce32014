"""The words of the tree libraries' errors and warnings, made fit for a load error or a log line.

XGBoost and Treelite errors start with a timestamp and a C++ source location and end with a stack trace; the
reason a user needs is the text in between. Treelite reports its warnings (an unknown JSON key, say) through
Python's `warnings`, which would reach stderr unformatted (and fail a test run that turns warnings into
errors): they are logged instead.
"""

from __future__ import annotations

import logging
import re
from contextlib import AbstractContextManager
from pathlib import Path

from modelhost.backends import framework_warnings
from modelhost.errors import ModelConfigError

log = logging.getLogger(__name__)

_PREFIX = re.compile(r"^(\[\d\d:\d\d:\d\d\] )?(\S+\.(cc|h|cpp|cu):\d+: )?")


def reason(err: BaseException) -> str:
    """The first line of a library error, without its timestamp and source location."""
    for line in str(err).splitlines():
        line = _PREFIX.sub("", line.strip())
        if line:
            return line
    return type(err).__name__


def load_error(model_name: str, model_type: str, path: Path, err: BaseException) -> ModelConfigError:
    return ModelConfigError(
        f"unable to load model '{model_name}': failed to read {model_type} model file '{path}': {reason(err)}"
    )


def warnings_logged(model_name: str) -> AbstractContextManager[None]:
    """Log, instead of emitting, the Python warnings raised inside the block."""
    return framework_warnings.logged(
        log, lambda message: f"model '{model_name}': {reason(Exception(str(message)))}"
    )


__all__ = ["load_error", "reason", "warnings_logged"]
