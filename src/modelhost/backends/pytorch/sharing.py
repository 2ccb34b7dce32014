"""ENABLE_WEIGHT_SHARING: the instances of a model version on one device run one loaded module.

A module is shared by key: the model version, its file as it is on disk (path, size, modification time, inode:
a reload with a new file never gets the old module) and the device. It is dropped when its last instance closes.
TorchScript and AOTInductor modules can be run by several threads at once, so sharing needs no lock around
execution; a stateful model (one that keeps state in its attributes between calls) must not share (Triton's
caveat too).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any


def module_key(model: str, version: int, path: Path, device: str) -> tuple[Hashable, ...]:
    stat = path.stat()
    return (model, version, str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino, device)


class SharedModules:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._modules: dict[Hashable, list[Any]] = {}  # key -> [module, instances holding it]

    def acquire(self, key: Hashable, load: Callable[[], Any]) -> tuple[Any, bool]:
        """The module for `key`, loaded by `load` unless an instance holds it already; and whether it was."""
        with self._lock:  # loads of shared modules are serialised: the second instance waits for the first
            entry = self._modules.get(key)
            if entry is not None:
                entry[1] += 1
                return entry[0], True
            module = load()
            self._modules[key] = [module, 1]
            return module, False

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
