"""The words of the tree libraries' errors and warnings, made fit for a load error or a log line.

XGBoost and Treelite errors start with a timestamp and a C++ source location and end with a stack trace; the
reason a user needs is the text in between. Treelite reports its warnings (an unknown JSON key, say) through
Python's `warnings`, which would reach stderr unformatted (and fail a test run that turns warnings into
errors): they are logged instead.
"""

from __future__ import annotations

import logging
import re
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from modelhost.errors import ModelConfigError

log = logging.getLogger(__name__)

_PREFIX = re.compile(r"^(\[\d\d:\d\d:\d\d\] )?(\S+\.(cc|h|cpp|cu):\d+: )?")
# warnings.catch_warnings changes process-wide state: one capture at a time.
_CAPTURE = threading.Lock()


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


@contextmanager
def warnings_logged(model_name: str) -> Iterator[None]:
    """Log, instead of emitting, the Python warnings raised inside the block."""
    with _CAPTURE, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for warning in caught:
                log.warning("model '%s': %s", model_name, reason(Exception(str(warning.message))))


__all__ = ["load_error", "reason", "warnings_logged"]
