"""`backend: "python"`: a `model.py` (or `default_model_filename`) with `TritonPythonModel`, one process per
instance (backends/python/instance.py), and `auto_complete_config` run in a short-lived stub at config time.

The same class serves python-based backends (backends/registry.py): `backend: "<name>"` with the model.py of
`<--backend-directory>/<name>/`, for every model that names it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from modelhost.backends.api import BackendContext
from modelhost.backends.python.autocomplete import autocomplete_python
from modelhost.backends.python.instance import PythonInstance
from modelhost.backends.python.process import StubSettings
from modelhost.errors import ModelConfigError


class PythonBackend:
    parallel_instances = True  # each instance is its own stub process

    def __init__(self, name: str = "python", model_file: Path | None = None) -> None:
        """`model_file`: a python-based backend's model.py, which serves every model of backend `name`."""
        self.name = name
        self.model_file = model_file

    @staticmethod
    def autocomplete(
        config: Any, model_dir: Path, *, default_max_batch_size: int, settings: Mapping[str, str]
    ) -> None:
        """The model's own auto_complete_config, run in a short-lived stub process (with the stub settings of
        --backend-config=python,...)."""
        autocomplete_python(config, model_dir, StubSettings.from_backend_config(dict(settings)))

    def complete(self, config: Any, model_dir: Path, settings: Mapping[str, str]) -> None:
        """A python-based backend's auto_complete_config, from its own model.py."""
        stub = StubSettings.from_backend_config(dict(settings))
        autocomplete_python(config, model_dir, stub, model_file=self.model_file)

    def load_instance(self, ctx: BackendContext, group: Any, index: int, device_id: int) -> PythonInstance:
        if self.model_file is not None:
            return PythonInstance(ctx, group, index, device_id, str(self.model_file))
        path = ctx.version_dir / ctx.config.default_model_filename  # "model.py" unless the config says
        if not path.is_file():
            raise ModelConfigError(
                f"unable to load model '{ctx.model_name}', the python backend needs {path} (set "
                "default_model_filename in the config for another file name)"
            )
        return PythonInstance(ctx, group, index, device_id, str(path))
