"""What a model directory holds, summarised, so a poll or a load request can tell what changed since the last load.

A model is reloaded when its shared files (config, labels, warmup data, configs/) change; a version is reloaded
when the files of its version directory change. A fingerprint lists (path, size, mtime) of every file: no file is
read, so polling a repository of large models costs a directory walk.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from modelhost.repository.layout import is_version_name


@dataclass(frozen=True, slots=True)
class ModelFingerprint:
    shared: str = ""
    versions: dict[int, str] = field(default_factory=dict)
    # The files outside the version directories other than the configuration (config.pbtxt, configs/): whether
    # a version must load again when the configuration changed is decided from the configs themselves, as
    # Triton does (a changed version_policy alone loads nothing again).
    shared_besides_config: str = ""


def _digest(rows: list[str]) -> str:
    return hashlib.blake2b("\n".join(sorted(rows)).encode(), digest_size=16).hexdigest()


def fingerprint(model_dir: Path) -> ModelFingerprint:
    shared: list[str] = []
    besides_config: list[str] = []
    versions: dict[int, list[str]] = {}
    for root, dirs, files in os.walk(model_dir):
        # Python's bytecode caches appear after a python model's first load: not a change of the model.
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel_root = os.path.relpath(root, model_dir)
        parts = [] if rel_root == "." else rel_root.split(os.sep)
        if parts and is_version_name(parts[0]):
            rows = versions.setdefault(int(parts[0]), [])
        else:
            rows = shared
            if not parts:  # empty version directories count too: they are versions
                for d in dirs:
                    if is_version_name(d):
                        versions.setdefault(int(d), [])
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:  # removed while we walk: the next poll sees the settled state
                continue
            row = f"{os.path.join(rel_root, name)}\t{st.st_size}\t{st.st_mtime_ns}"
            rows.append(row)
            if rows is shared and not _is_config(parts, name):
                besides_config.append(row)
    return ModelFingerprint(
        _digest(shared), {v: _digest(rows) for v, rows in sorted(versions.items())}, _digest(besides_config)
    )


def _is_config(parts: list[str], name: str) -> bool:
    return (not parts and name == "config.pbtxt") or (bool(parts) and parts[0] == "configs")
