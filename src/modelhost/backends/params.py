"""Reading a model's `parameters { key: ... value: { string_value: ... } }` the way Triton's backends do.

Every backend takes its settings as strings in the config (and some from `--backend-config=<backend>,k=v`);
these helpers give one wording for a bad value across backends, naming the model and the parameter.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from modelhost.errors import ModelConfigError

log = logging.getLogger(__name__)

_TRUE = ("true", "1", "on", "yes")
_FALSE = ("false", "0", "off", "no")


def param(config: Any, key: str) -> str | None:
    """The string value of parameter `key`, or None when the config does not set it."""
    if key in config.parameters:
        return str(config.parameters[key].string_value)
    return None


def bool_param(config: Any, key: str, default: bool) -> bool:
    raw = param(config, key)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ModelConfigError(f"model '{config.name}': parameter '{key}' must be 'true' or 'false', got '{raw}'")


def int_param(
    config: Any, key: str, *, fallback: dict[str, str] | None = None, minimum: int = 0
) -> int | None:
    """An integer parameter of the model, else of `fallback` (the backend's --backend-config settings)."""
    raw = param(config, key)
    if raw is None and fallback is not None:
        raw = fallback.get(key)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError as e:
        raise ModelConfigError(
            f"model '{config.name}': parameter '{key}' must be an integer, got '{raw}'"
        ) from e
    if value < minimum:
        raise ModelConfigError(f"model '{config.name}': parameter '{key}' must be >= {minimum}, got {value}")
    return value


def float_param(config: Any, key: str) -> float | None:
    raw = param(config, key)
    if raw is None or raw.strip() == "":
        return None
    try:
        return float(raw)
    except ValueError as e:
        raise ModelConfigError(
            f"model '{config.name}': parameter '{key}' must be a number, got '{raw}'"
        ) from e


def choice_param(config: Any, key: str, choices: tuple[str, ...], default: str) -> str:
    """A parameter taking one of `choices` (compared without case); `default` when unset."""
    raw = param(config, key)
    if raw is None or raw.strip() == "":
        return default
    for choice in choices:
        if raw.strip().lower() == choice.lower():
            return choice
    raise ModelConfigError(
        f"model '{config.name}': parameter '{key}' must be one of {', '.join(choices)}, got '{raw}'"
    )


def warn_removed(config: Any, removed: dict[str, str], backend: str) -> None:
    """Log once per load, for each removed parameter the config still sets, what replaced it (or that it is
    ignored): Triton's backends accept such configs with a warning, and so do we."""
    for key, advice in removed.items():
        if key in config.parameters:
            log.warning(
                "model '%s': %s parameter '%s' is no longer used: %s", config.name, backend, key, advice
            )


def group_kind(group: Any) -> str:
    """An instance group's kind by name: "KIND_CPU", "KIND_GPU", "KIND_MODEL"."""
    name: str = group.DESCRIPTOR.fields_by_name["kind"].enum_type.values_by_number[group.kind].name
    return name


def model_path(ctx: Any, default_filename: str) -> Path:
    """The model file (or directory) of a version: `default_model_filename`, else the backend's default name."""
    path: Path = ctx.version_dir / (ctx.config.default_model_filename or default_filename)
    if not path.exists():
        raise ModelConfigError(
            f"unable to load model '{ctx.model_name}' version {ctx.version}: model file '{path}' not found"
        )
    return path


__all__ = [
    "bool_param",
    "choice_param",
    "float_param",
    "group_kind",
    "int_param",
    "model_path",
    "param",
    "warn_removed",
]
