"""Finding and reading the model file: an OpenVINO Core (with the config's CPU extension) and `read_model`.

`default_model_filename` names the file (or directory) in the version directory: `model.xml` by default, whose
weights OpenVINO reads from the `.bin` file of the same name beside it; `model.onnx`, `model.tflite`,
`model.pdmodel`, `model.pb` or a `model.saved_model` directory are read by OpenVINO's frontends, as in Triton.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openvino as ov  # type: ignore[import-untyped, unused-ignore]

from modelhost.errors import ModelConfigError
from modelhost.repository.layout import version_directories

DEFAULT_MODEL_FILENAME = "model.xml"


def load_path(version_dir: Path, filename: str, model_name: str, version: int) -> Path:
    """The model file of a version being loaded; Triton's wording when it is missing."""
    path = version_dir / (filename or DEFAULT_MODEL_FILENAME)
    if not path.exists():
        raise ModelConfigError(f"unable to find '{path}' for model '{model_name}' version {version}")
    return path


def autocomplete_path(model_dir: Path, filename: str) -> Path | None:
    """The model file auto-complete reads: the highest version's that has one."""
    for version_dir in reversed(version_directories(model_dir).values()):
        candidate = version_dir / (filename or DEFAULT_MODEL_FILENAME)
        if candidate.exists():
            return candidate
    return None


def new_core(cpu_extension: str | None, model_name: str) -> Any:
    """An OpenVINO Core for one model, with the custom-layer library of CPU_EXTENSION_PATH added, as Triton's
    backend adds it (`Core::add_extension`), before the model is read: its layers may appear in it."""
    core = ov.Core()
    if cpu_extension is not None:
        if not Path(cpu_extension).is_file():
            raise ModelConfigError(
                f"unable to load model '{model_name}': CPU_EXTENSION_PATH '{cpu_extension}' is not a file"
            )
        try:
            core.add_extension(cpu_extension)
        except Exception as e:  # OpenVINO raises RuntimeError, pybind11 TypeError for a wrong library
            raise ModelConfigError(
                f"unable to load model '{model_name}': failed to load CPU_EXTENSION_PATH '{cpu_extension}' as "
                f"an OpenVINO extension: {e}"
            ) from e
    return core


def read_model(core: Any, path: Path, where: str) -> Any:
    """`core.read_model(path)`; a file OpenVINO cannot read becomes ModelConfigError naming it, after `where`
    ("unable to load model 'm' version 1")."""
    try:
        return core.read_model(str(path))
    except Exception as e:  # RuntimeError from the frontends; any other fault reads the same to the user
        raise ModelConfigError(f"{where}: failed to read OpenVINO model '{path}': {str(e).strip()}") from e


__all__ = ["DEFAULT_MODEL_FILENAME", "autocomplete_path", "load_path", "new_core", "read_model"]
