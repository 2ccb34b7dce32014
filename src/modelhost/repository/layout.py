"""Triton's model repository layout: `<repo>/<model>/<version>/<model file>`.

Version directories are decimal numbers without a leading zero; anything else in a model directory (configs/,
warmup/, label files, "0", "01", "latest") is not a version.
"""

from __future__ import annotations

from pathlib import Path


def is_version_name(name: str) -> bool:
    return name.isdigit() and name.isascii() and not name.startswith("0")


def version_directories(model_dir: Path) -> dict[int, Path]:
    """The version directories of a model, by version number."""
    found: dict[int, Path] = {}
    try:
        entries = list(model_dir.iterdir())
    except OSError:
        return found
    for entry in entries:
        if entry.is_dir() and is_version_name(entry.name):
            found[int(entry.name)] = entry
    return dict(sorted(found.items()))


def model_directories(repository: Path) -> dict[str, Path]:
    """The model directories of one local repository, by model name (hidden directories skipped)."""
    found: dict[str, Path] = {}
    for entry in sorted(repository.iterdir()):
        if entry.is_dir() and not entry.name.startswith("."):
            found[entry.name] = entry
    return found
