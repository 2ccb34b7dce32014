"""`backend: "python"`: a `model.py` (or `default_model_filename`) with `TritonPythonModel`, one process per
instance (python_backend/instance.py), and `auto_complete_config` run in a short-lived stub at config time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from modelhost.backends.base import BackendContext
from modelhost.errors import ModelConfigError
from modelhost.python_backend.instance import PythonInstance

DEFAULT_MODEL_FILENAME = "model.py"


def model_file(config: Any, version_dir: Path) -> Path:
    return version_dir / (config.default_model_filename or DEFAULT_MODEL_FILENAME)


class PythonBackend:
    name = "python"

    def load_instance(self, ctx: BackendContext, group: Any, index: int, device_id: int) -> PythonInstance:
        path = model_file(ctx.config, ctx.version_dir)
        if not path.is_file():
            raise ModelConfigError(
                f"unable to load model '{ctx.model_name}', the python backend needs {path} (set "
                "default_model_filename in the config for another file name)"
            )
        return PythonInstance(ctx, group, index, device_id, str(path))
