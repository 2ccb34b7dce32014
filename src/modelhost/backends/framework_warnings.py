"""Python warnings raised by a framework while a backend loads a model, kept out of the server's output.

`warnings.catch_warnings` swaps process-wide state and restores what it saw on entry, so two such blocks that
overlap on different threads (loads run in parallel) can leave a dead capture installed for good: every later
warning of the process would be recorded into a list nobody reads, and memory would grow with each. Every backend
therefore goes through these helpers, which hold one process-wide lock for the duration of the block.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_SWAP = threading.RLock()


@contextmanager
def ignored(*categories: type[Warning]) -> Iterator[None]:
    """Ignore warnings of `categories` raised inside the block (a framework's own deprecations at import)."""
    with _SWAP, warnings.catch_warnings():
        for category in categories:
            warnings.simplefilter("ignore", category)
        yield


@contextmanager
def logged(log: logging.Logger, describe: Callable[[Warning | str], str]) -> Iterator[None]:
    """Log, instead of emitting, every warning raised inside the block, as `describe(message)` says it."""
    with _SWAP, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for warning in caught:
                log.warning("%s", describe(warning.message))


__all__ = ["ignored", "logged"]
