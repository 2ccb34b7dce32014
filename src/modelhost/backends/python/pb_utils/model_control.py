"""Model control from a model (explicit model control mode): load_model, unload_model, is_model_ready."""

from __future__ import annotations

import re

from modelhost.backends.python.pb_utils.errors import TritonModelException
from modelhost.backends.python.pb_utils.runtime import require_runtime


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load (or reload) a model, optionally with a config JSON and override files (path -> content)."""
    if not isinstance(model_name, str) or not isinstance(config, str):
        raise TypeError("load_model(): model_name and config must be str")
    files_map: dict[str, bytes] = {}
    if files is not None:
        if not isinstance(files, dict):
            raise TritonModelException(
                f"failed to load model '{model_name}', files should be a dictionary of file paths and file contents"
            )
        for path, content in files.items():
            if not isinstance(path, str) or not isinstance(content, bytes):
                raise TypeError("load_model(): files must map str paths to bytes contents")
            files_map[path] = content
    runtime = require_runtime("load_model()")
    try:
        runtime.model_control("load", model_name, config=config, files=files_map)
    except TritonModelException as e:
        raise TritonModelException(f"Failed to load model: {e}") from e


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    if not isinstance(model_name, str):
        raise TypeError("unload_model(): model_name must be a str")
    runtime = require_runtime("unload_model()")
    try:
        runtime.model_control("unload", model_name, unload_dependents=bool(unload_dependents))
    except TritonModelException as e:
        raise TritonModelException(f"Failed to unload model: {e}") from e


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether the model (the given version, or its latest with "") is ready."""
    if not isinstance(model_name, str) or not isinstance(model_version, str):
        raise TypeError("is_model_ready(): model_name and model_version must be str")
    failure = "Failed to check model readiness"
    if model_version:
        # Triton parses the version with std::stol: leading digits, an optional sign, then anything.
        match = re.match(r"\s*([+-]?\d+)", model_version)
        if match is None:
            raise TritonModelException(
                f"{failure}: failed to get model version from specified version string '{model_version}' "
                "(details: stol), version should be an integral value > 0"
            )
        if int(match.group(1)) < 0:
            raise TritonModelException(
                f"{failure}: failed to get model version from specified version string '{model_version}', "
                "version should be an integral value > 0"
            )
        model_version = match.group(1).lstrip("+")
    runtime = require_runtime("is_model_ready()")
    try:
        return bool(runtime.model_control("is_ready", model_name, model_version=model_version))
    except TritonModelException as e:
        raise TritonModelException(f"{failure}: {e}") from e
