"""Which backend serves a model: a table of backend names to the classes that implement them.

A name not in the table may be a python-based backend, as in Triton: `<--backend-directory>/<name>/model.py`,
served by the python backend with that file for every model that names the backend.

Backends are imported only when a model needs one, so that the contract (backends/api.py) and the config code
never import an implementation, and an optional framework is loaded only where it is used. A backend whose
framework is not installed leaves its models UNAVAILABLE with the extra to install named.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelhost.backends.api import Backend
from modelhost.errors import ModelConfigError


@dataclass(frozen=True, slots=True)
class BackendEntry:
    target: str  # "module:class"
    # The pip extra that installs its framework (`pip install 'modelhost[<extra>]'`), and the top-level modules
    # of that framework: an import error naming one of them means the extra is missing.
    extra: str = ""
    frameworks: tuple[str, ...] = ()


# Backend name (the config's `backend`, which the backend-field fill sets for every platform) -> its entry.
# A new backend adds its line here and touches nothing else outside its own package.
_BACKENDS: dict[str, BackendEntry] = {
    "onnxruntime": BackendEntry("modelhost.backends.onnxruntime.backend:OnnxRuntimeBackend"),
    "python": BackendEntry("modelhost.backends.python.backend:PythonBackend"),
    "pytorch": BackendEntry("modelhost.backends.pytorch.backend:PyTorchBackend", "torch", ("torch",)),
    "openvino": BackendEntry(
        "modelhost.backends.openvino.backend:OpenVINOBackend", "openvino", ("openvino",)
    ),
    "fil": BackendEntry(
        "modelhost.backends.fil.backend:FilBackend", "fil", ("xgboost", "lightgbm", "treelite")
    ),
    "tensorrt": BackendEntry(
        "modelhost.backends.tensorrt.backend:TensorRTBackend", "tensorrt", ("tensorrt",)
    ),
    "tensorflow": BackendEntry(
        "modelhost.backends.tensorflow.backend:TensorFlowBackend", "tensorflow", ("tensorflow",)
    ),
}


# tritonserver's --backend-directory: where python-based backends are found (set at startup).
DEFAULT_BACKEND_DIRECTORY = "/opt/tritonserver/backends"
_backend_directory = Path(DEFAULT_BACKEND_DIRECTORY)


def set_backend_directory(path: str | Path) -> None:
    global _backend_directory
    _backend_directory = Path(path)


def python_based(name: str) -> Path | None:
    """The model.py of python-based backend `name` (<backend directory>/<name>/model.py), or None where modelhost
    has a backend of that name or the directory has no such file."""
    if not name or name in _BACKENDS or name != os.path.basename(name) or name in (".", ".."):
        return None
    path = _backend_directory / name / "model.py"
    return path if path.is_file() else None


# `modelhost convert <name>`: model converters a backend provides, "module:function(argv) -> exit code", each with
# its backend's entry (whose extra a missing framework names) and a one-line description.
_CONVERTERS: dict[str, tuple[str, str, str]] = {
    "onnx-to-tensorrt": (
        "modelhost.backends.tensorrt.convert:main",
        "tensorrt",
        "Build a TensorRT plan (model.plan) from an ONNX model, with an optimisation profile (trtexec's job).",
    ),
}


def converters() -> dict[str, str]:
    """Converter name -> its description."""
    return {name: description for name, (_, _, description) in _CONVERTERS.items()}


def run_converter(name: str, argv: list[str]) -> int:
    """Run converter `name` on its arguments; its exit code. The caller checks that `name` exists."""
    target, backend, _ = _CONVERTERS[name]
    module, _, attribute = target.partition(":")
    entry = _BACKENDS[backend]
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as e:
        missing = (e.name or "").partition(".")[0]
        if missing not in entry.frameworks:
            raise
        raise MissingExtra(
            f"'{name}' needs the Python package '{missing}', which is not installed; install it with: "
            f"pip install 'modelhost[{entry.extra}]'"
        ) from e
    code: int = getattr(loaded, attribute)(argv)
    return code


def register(name: str, target: str, extra: str = "", frameworks: tuple[str, ...] = ()) -> None:
    """Serve models of backend `name` with the class at "module:class"."""
    _BACKENDS[name] = BackendEntry(target, extra, frameworks)


def supported() -> list[str]:
    return sorted(_BACKENDS)


class MissingExtra(ModelConfigError):
    """A backend's framework is not installed."""


def _backend_class(name: str, model_name: str) -> type[Backend] | None:
    entry = _BACKENDS.get(name)
    if entry is None:
        return None
    module, _, attribute = entry.target.partition(":")
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as e:
        missing = (e.name or "").partition(".")[0]
        if missing in entry.frameworks:
            raise MissingExtra(
                f"unable to load model '{model_name}': the {name} backend needs the Python package "
                f"'{missing}', which is not installed; install it with: pip install 'modelhost[{entry.extra}]'"
            ) from e
        raise
    cls: type[Backend] = getattr(loaded, attribute)
    return cls


def runs_on_gpu(name: str, model_name: str) -> bool:
    """Whether the backend's instances can run on a GPU here: False only where its class says so with a
    `gpu_capable()` static method (ONNX Runtime without its CUDA provider). A backend that cannot be imported
    answers True, and its load says why."""
    try:
        cls = _backend_class(name, model_name) if python_based(name) is None else None
    except MissingExtra:
        return True
    capable = getattr(cls, "gpu_capable", None)
    return True if capable is None else bool(capable())


def backend_module(name: str) -> str:
    """The module that implements a backend ("" for a name no backend has)."""
    entry = _BACKENDS.get(name)
    return entry.target.partition(":")[0] if entry is not None else ""


def _check_runtime(config: Any, name: str) -> None:
    """`runtime` names the backend's library in Triton. modelhost's backends are not libraries: it accepts the
    name Triton would use (libtriton_<backend>.so) and "model.py" (a python-based backend, which the backend
    judges), and refuses any other in Triton's words."""
    runtime = config.runtime
    if not runtime or runtime in (f"libtriton_{name}.so", "model.py"):
        return
    if os.path.isabs(runtime) or os.path.normpath(runtime).split(os.sep)[0] == "..":
        raise ModelConfigError(f"backend library name '{runtime}' escapes backend directory")
    raise ModelConfigError(f"unable to find backend library '{runtime}' for model '{config.name}'")


def backend_for(config: Any) -> Backend:
    """The backend that serves a normalised config."""
    name = config.backend or config.platform
    _check_runtime(config, name)
    model_file = python_based(name)
    if model_file is not None:
        python = _backend_class("python", config.name)
        assert python is not None
        return python(name, model_file)  # type: ignore[call-arg]
    cls = _backend_class(name, config.name)
    if cls is None:
        raise ModelConfigError(
            f"backend '{name}' for model '{config.name}' is not supported (supported: {', '.join(supported())})"
        )
    return cls()


def backend_settings(table: Mapping[str, Mapping[str, str]], name: str) -> dict[str, str]:
    """The --backend-config settings backend `name` sees: the global ones (""), then a python-based backend's
    python ones, then its own."""
    layers = ["", "python", name] if python_based(name) is not None else ["", name]
    merged: dict[str, str] = {}
    for layer in layers:
        merged.update(table.get(layer, {}))
    return merged


def autocomplete(
    config: Any,
    model_dir: Path,
    *,
    default_max_batch_size: int,
    backend_config: Mapping[str, Mapping[str, str]] | None = None,
) -> bool:
    """Run the backend's auto-complete hook on `config` in place, with its --backend-config settings (the
    table, by backend name); False when its backend has none (or is not one of ours: validation and the load
    then say so)."""
    settings = backend_settings(backend_config or {}, config.backend)
    model_file = python_based(config.backend)
    if model_file is not None:
        python = _backend_class("python", config.name or model_dir.name)
        assert python is not None
        backend = python(config.backend, model_file)  # type: ignore[call-arg]
        backend.complete(config, model_dir, settings)  # type: ignore[attr-defined]
        return True
    cls = _backend_class(config.backend, config.name or model_dir.name)
    hook = getattr(cls, "autocomplete", None)
    if hook is None:
        return False
    hook(config, model_dir, default_max_batch_size=default_max_batch_size, settings=settings)
    return True


__all__ = [
    "BackendEntry",
    "MissingExtra",
    "autocomplete",
    "backend_for",
    "backend_settings",
    "converters",
    "python_based",
    "register",
    "run_converter",
    "runs_on_gpu",
    "set_backend_directory",
    "supported",
]
