"""Which backend serves a model: a table of backend names to the classes that implement them.

Backends register by name and are imported only when a model needs one, so that the contract (backends/base.py)
and the config code never import an implementation, and an optional framework is loaded only where it is used.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from modelhost.backends.base import Backend
from modelhost.errors import ModelConfigError

# backend or platform name -> "module:class". A new backend adds its line here and touches nothing else.
_BACKENDS: dict[str, str] = {
    "onnxruntime": "modelhost.backends.onnxruntime:OnnxRuntimeBackend",
    "onnxruntime_onnx": "modelhost.backends.onnxruntime:OnnxRuntimeBackend",
    "python": "modelhost.python_backend.backend:PythonBackend",
}


def register(name: str, target: str) -> None:
    """Serve models of backend (or platform) `name` with the class at "module:class"."""
    _BACKENDS[name] = target


def supported() -> list[str]:
    return sorted({n for n in _BACKENDS if "_" not in n})


def _backend_class(name: str) -> type[Backend] | None:
    target = _BACKENDS.get(name)
    if target is None:
        return None
    module, _, attribute = target.partition(":")
    cls: type[Backend] = getattr(importlib.import_module(module), attribute)
    return cls


def backend_for(config: Any) -> Backend:
    """The backend that serves a normalised config."""
    name = config.backend or config.platform
    cls = _backend_class(name)
    if cls is None:
        raise ModelConfigError(
            f"backend '{name}' for model '{config.name}' is not supported yet (supported: "
            f"{', '.join(supported())})"
        )
    return cls()


def autocomplete(config: Any, model_dir: Path, *, default_max_batch_size: int) -> bool:
    """Run the backend's auto-complete hook on `config` in place; False when its backend has none."""
    cls = _backend_class(config.backend)
    hook = getattr(cls, "autocomplete", None)
    if hook is None:
        return False
    hook(config, model_dir, default_max_batch_size=default_max_batch_size)
    return True
