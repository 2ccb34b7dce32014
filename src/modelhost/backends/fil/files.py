"""Where a FIL model's file is: `default_model_filename`, else the model_type's default name.

As in FIL, a default_model_filename that names a directory means the model_type's default file inside it.
"""

from __future__ import annotations

from pathlib import Path

from modelhost.backends.fil.settings import MODEL_FILES
from modelhost.errors import ModelConfigError
from modelhost.repository.layout import version_directories


def _in_version(version_dir: Path, default_model_filename: str, model_type: str) -> Path:
    path = version_dir / (default_model_filename or MODEL_FILES[model_type])
    return path / MODEL_FILES[model_type] if path.is_dir() else path


def model_file(
    model_name: str, version: int, version_dir: Path, default_model_filename: str, model_type: str
) -> Path:
    path = _in_version(version_dir, default_model_filename, model_type)
    if not path.is_file():
        raise ModelConfigError(
            f"unable to load model '{model_name}' version {version}: model file '{path}' not found "
            f"(model_type '{model_type}')"
        )
    return path


def newest_model_file(model_dir: Path, default_model_filename: str, model_type: str) -> Path | None:
    """The model file of the highest version that has one (what auto-complete reads), or None."""
    for version_dir in reversed(version_directories(model_dir).values()):
        path = _in_version(version_dir, default_model_filename, model_type)
        if path.is_file():
            return path
    return None


__all__ = ["model_file", "newest_model_file"]
