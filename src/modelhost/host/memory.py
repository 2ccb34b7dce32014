"""Giving memory back to the operating system after a model is unloaded.

A runtime session frees its weights and arenas on close, but glibc's malloc keeps freed pages in its per-thread
arenas for reuse, so without a trim the server's RSS stays near its high-water mark after every unload, and
load/unload cycles look like a leak to anyone watching the container's memory.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None
    return trim


def release_free_memory() -> None:
    """Return free heap pages to the OS (glibc only; a no-op elsewhere). Blocking: call off the event loop."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
