"""ENABLE_WEIGHT_SHARING: the instances of a model version on one device run one loaded module.

A module is shared by key: the model version, its file as it is on disk (path, size, modification time, inode:
a reload with a new file never gets the old module) and the device. It is dropped when its last instance closes.
TorchScript and AOTInductor modules can be run by several threads at once, so sharing needs no lock around
execution; a stateful model (one that keeps state in its attributes between calls) must not share (Triton's
caveat too).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from functools import partial
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def module_key(model: str, version: int, path: Path, device: str) -> tuple[Hashable, ...]:
    stat = path.stat()
    return (model, version, str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino, device)


class SharedModules:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._modules: dict[Hashable, list[Any]] = {}  # key -> [module, instances holding it]
        self._loading: dict[Hashable, threading.Lock] = {}  # key -> held while that key's module loads

    def _take(self, key: Hashable) -> Any | None:
        entry = self._modules.get(key)
        if entry is None:
            return None
        entry[1] += 1
        return entry[0]

    def acquire(self, key: Hashable, load: Callable[[], Any]) -> tuple[Any, bool]:
        """The module for `key`, loaded by `load` unless an instance holds it already; and whether it was.

        Only loads of the same key wait for each other (the second instance then reuses the first's module); the
        global lock is never held while a file loads, so other models load and unload meanwhile."""
        with self._lock:
            module = self._take(key)
            if module is not None:
                return module, True
            key_lock = self._loading.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                module = self._take(key)
                if module is not None:
                    return module, True
            module = load()
            with self._lock:
                self._modules[key] = [module, 1]
                self._loading.pop(key, None)
            return module, False

    def load(
        self, share: bool, key: Callable[[], Hashable], load: Callable[[], Any], reused_message: str
    ) -> tuple[Any, Callable[[], None] | None, bool]:
        """An instance's module: shared by `key` when `share` (ENABLE_WEIGHT_SHARING), else its own. Returns the
        module, the release to call when the instance closes (None when not shared), and whether it was reused
        (logged with `reused_message`)."""
        if not share:
            return load(), None, False
        shared_key = key()
        module, reused = self.acquire(shared_key, load)
        if reused:
            log.info("%s", reused_message)
        return module, partial(self.release, shared_key), reused

    def release(self, key: Hashable) -> None:
        with self._lock:
            entry = self._modules.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] <= 0:
                del self._modules[key]

    def held(self, key: Hashable) -> int:
        with self._lock:
            entry = self._modules.get(key)
            return 0 if entry is None else int(entry[1])


# The shared modules of this process.
SHARED_MODULES = SharedModules()

__all__ = ["SHARED_MODULES", "SharedModules", "module_key"]
