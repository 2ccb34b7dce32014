"""Filling `platform`, `backend` and `default_model_filename` (Triton core AutoCompleteBackendFields).

This runs for every model, auto-complete or not. When a config names neither platform nor backend, the backend
is inferred from the model file found in a version directory, in Triton's order: TensorFlow (model.savedmodel
directory / model.graphdef file) -> TensorRT (model.plan file) -> ONNX Runtime (model.onnx file or directory)
-> OpenVINO (model.xml) -> PyTorch (model.pt / model.pt2 file) -> Python (model.py) -> a custom backend named
by the model directory's suffix (`<name>.<backend>`).

Triton inspects only the first version directory; we inspect the lowest-numbered version directory holding
one of those files, which gives the same answer whenever Triton finds one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.config import constants as c
from modelhost.errors import ModelConfigError
from modelhost.repository.layout import version_directories

FileKind = Literal["file", "dir", "any"]

# Every file name whose presence in a version directory can decide the backend.
_KNOWN_MODEL_FILES = (
    c.TENSORFLOW_SAVEDMODEL_FILENAME,
    c.TENSORFLOW_GRAPHDEF_FILENAME,
    c.TENSORRT_FILENAME,
    c.ONNXRUNTIME_FILENAME,
    c.OPENVINO_FILENAME,
    c.PYTORCH_FILENAME,
    c.PYTORCH_AOTI_FILENAME,
    c.PYTHON_FILENAME,
)


def inspected_version_dir(model_dir: Path) -> Path | None:
    """The version directory whose files decide the backend: the lowest version holding a known model file."""
    for version_dir in version_directories(model_dir).values():
        if any((version_dir / name).exists() for name in _KNOWN_MODEL_FILES):
            return version_dir
    return None


def _in_version(config: ModelConfig, vdir: Path | None, filename: str, kind: FileKind = "any") -> bool:
    """Whether the files decide for `filename`: the config gives neither platform nor default_model_filename,
    and the inspected version directory holds `filename` as a `kind` ("file", "dir" or "any")."""
    if vdir is None or config.platform or config.default_model_filename:
        return False
    path = vdir / filename
    return {"file": path.is_file, "dir": path.is_dir, "any": path.exists}[kind]()


@dataclass(frozen=True, slots=True)
class _OneFileBackend:
    """A backend decided by its one model file: named by the config (backend, platform or
    default_model_filename) or found in the inspected version directory. It then completes the fields the config
    leaves empty."""

    backend: str
    filename: str
    kind: FileKind = "any"  # what `filename` must be in the version directory
    platform: str = ""  # its one platform; "" for a backend that has none

    def fill(self, config: ModelConfig, vdir: Path | None) -> bool:
        if not config.backend and (
            (self.platform and config.platform == self.platform)
            or config.default_model_filename == self.filename
            or _in_version(config, vdir, self.filename, self.kind)
        ):
            config.backend = self.backend
        if config.backend != self.backend:
            return False
        config.platform = config.platform or self.platform
        config.default_model_filename = config.default_model_filename or self.filename
        return True


_TENSORRT = _OneFileBackend(c.TENSORRT_BACKEND, c.TENSORRT_FILENAME, "file", c.TENSORRT_PLATFORM)
# model.onnx may be a file or a directory (a large model with external data).
_ONNXRUNTIME = _OneFileBackend(c.ONNXRUNTIME_BACKEND, c.ONNXRUNTIME_FILENAME, "any", c.ONNXRUNTIME_PLATFORM)
_OPENVINO = _OneFileBackend(c.OPENVINO_BACKEND, c.OPENVINO_FILENAME)
_PYTHON = _OneFileBackend(c.PYTHON_BACKEND, c.PYTHON_FILENAME)


# The backends with two platforms, each with its own model file.


def _fill_tensorflow(config: ModelConfig, vdir: Path | None) -> bool:
    if not config.platform and config.backend in ("", c.TENSORFLOW_BACKEND):
        filename = config.default_model_filename
        if filename == c.TENSORFLOW_SAVEDMODEL_FILENAME or (
            _in_version(config, vdir, c.TENSORFLOW_SAVEDMODEL_FILENAME, "dir")
            and not _in_version(config, vdir, c.TENSORFLOW_GRAPHDEF_FILENAME, "file")
        ):
            config.platform = c.TENSORFLOW_SAVEDMODEL_PLATFORM
        elif filename == c.TENSORFLOW_GRAPHDEF_FILENAME or _in_version(
            config, vdir, c.TENSORFLOW_GRAPHDEF_FILENAME, "file"
        ):
            config.platform = c.TENSORFLOW_GRAPHDEF_PLATFORM
    if config.platform not in (c.TENSORFLOW_SAVEDMODEL_PLATFORM, c.TENSORFLOW_GRAPHDEF_PLATFORM):
        return False
    config.backend = config.backend or c.TENSORFLOW_BACKEND
    if not config.default_model_filename:
        saved = config.platform == c.TENSORFLOW_SAVEDMODEL_PLATFORM
        config.default_model_filename = (
            c.TENSORFLOW_SAVEDMODEL_FILENAME if saved else c.TENSORFLOW_GRAPHDEF_FILENAME
        )
    return True


def _fill_pytorch(config: ModelConfig, vdir: Path | None) -> bool:
    if not config.backend:
        if config.platform in (c.PYTORCH_PLATFORM, c.PYTORCH_PLATFORM_ALT) or (
            config.default_model_filename == c.PYTORCH_FILENAME
        ):
            config.backend = c.PYTORCH_BACKEND
        elif (
            config.platform == c.PYTORCH_AOTI_PLATFORM
            or config.default_model_filename == c.PYTORCH_AOTI_FILENAME
        ):
            config.backend = c.PYTORCH_BACKEND
            config.platform = c.PYTORCH_AOTI_PLATFORM
        elif _in_version(config, vdir, c.PYTORCH_FILENAME, "file"):
            config.backend = c.PYTORCH_BACKEND
            config.platform = c.PYTORCH_PLATFORM
        elif _in_version(config, vdir, c.PYTORCH_AOTI_FILENAME, "file"):
            config.backend = c.PYTORCH_BACKEND
            config.platform = c.PYTORCH_AOTI_PLATFORM
    if config.backend != c.PYTORCH_BACKEND:
        return False
    config.platform = config.platform or c.PYTORCH_PLATFORM
    if not config.default_model_filename:
        aoti = config.platform == c.PYTORCH_AOTI_PLATFORM
        config.default_model_filename = c.PYTORCH_AOTI_FILENAME if aoti else c.PYTORCH_FILENAME
    return True


# In Triton's order. TensorFlow and PyTorch choose between two platforms (and files) each, by their own rules.
_FILLS: tuple[Callable[[ModelConfig, Path | None], bool], ...] = (
    _fill_tensorflow,
    _TENSORRT.fill,
    _ONNXRUNTIME.fill,
    _OPENVINO.fill,
    _fill_pytorch,
    _PYTHON.fill,
)


def fill_backend_fields(config: ModelConfig, model_name: str, model_dir: Path) -> None:
    """Complete platform/backend/default_model_filename in place, as Triton's core does for every model."""
    vdir = inspected_version_dir(model_dir)
    for fill in _FILLS:
        if fill(config, vdir):
            return
    if config.backend or config.platform or config.default_model_filename:
        # Ensembles, custom backends and unknown platforms: left for validation to judge.
        return
    # A custom backend, named by the model directory: "<anything>.<backend>" -> backend "<backend>".
    _, dot, backend = model_name.partition(".")
    if not dot or not backend:
        looked_for = ", ".join(_KNOWN_MODEL_FILES)
        # Triton's words first (its qa suites grep for them), then where modelhost looked.
        raise ModelConfigError(
            f"Invalid model name: Could not determine backend for model '{model_name}' with no backend in model "
            "configuration. Expected model name of the form 'model.<backend_name>'. (No version directory of "
            f"{model_dir} holds a known model file: {looked_for}; or set 'platform' or 'backend'.)"
        )
    config.backend = backend
    config.default_model_filename = f"model.{backend}"


__all__ = ["fill_backend_fields", "inspected_version_dir"]
