"""The parameters of a load request: a config override, and file overrides written to a private directory.

Triton's rules: `config` (a ModelConfig as JSON) replaces config.pbtxt; `file:<path>` parameters carry a whole
model directory's files, need a `config`, and the model is then loaded from those files alone. A file path must
stay inside that directory: absolute paths, `..` and links are refused before anything is written.
"""

from __future__ import annotations

import base64
import binascii
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from modelhost.errors import InvalidArgument

FILE_PREFIX = "file:"


@dataclass(slots=True)
class LoadOverride:
    config_json: str | None = None
    files: dict[str, bytes] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return self.config_json is None and not self.files


def check_model_name(name: str) -> None:
    """A model name is one directory name: no separators, no `..`, not empty."""
    if not name.strip():
        raise InvalidArgument("model name must not be empty")
    if "/" in name or "\\" in name or "\0" in name or name in (".", ".."):
        raise InvalidArgument(f"invalid model name '{name}': a model name is a single directory name")


def parse_load_parameters(parameters: dict[str, Any], *, files_base64: bool) -> LoadOverride:
    """Parameters of a load request (HTTP: JSON values, file contents base64; gRPC: bytes)."""
    override = LoadOverride()
    for key, value in parameters.items():
        if key == "config":
            if not isinstance(value, str):
                raise InvalidArgument("load parameter 'config' must be a string holding the config as JSON")
            override.config_json = value
        elif key.startswith(FILE_PREFIX):
            override.files[_checked_path(key)] = _file_content(key, value, files_base64)
        else:
            raise InvalidArgument(f"Unrecognized load parameter '{key}'.")
    if override.files and override.config_json is None:
        raise InvalidArgument(
            "failed to load model: a file override (file:<path>) requires a 'config' parameter"
        )
    return override


def _checked_path(key: str) -> str:
    path = key[len(FILE_PREFIX) :]
    pure = PurePosixPath(path)
    if not path or "\\" in path or "\0" in path or pure.is_absolute() or ".." in pure.parts:
        raise InvalidArgument(f"invalid file override '{key}': the path must stay within model directory")
    return str(pure)


def _file_content(key: str, value: Any, files_base64: bool) -> bytes:
    if isinstance(value, bytes) and not files_base64:
        return value
    if not isinstance(value, str):
        raise InvalidArgument(f"file override '{key}' must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise InvalidArgument(f"file override '{key}' is not valid base64: {e}") from e


def write_model_files(name: str, files: dict[str, bytes]) -> tuple[tempfile.TemporaryDirectory[str], Path]:
    """A private temporary directory holding `<name>/<path>` for every file; keep the handle alive while loaded."""
    holder = tempfile.TemporaryDirectory(prefix="modelhost-override-")
    model_dir = Path(holder.name) / name
    model_dir.mkdir()
    root = model_dir.resolve()
    try:
        for rel, content in files.items():
            target = model_dir / rel
            # Checked again on the real path: nothing written may land outside the model directory.
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.parent.resolve().is_relative_to(root) or target.is_symlink():
                raise InvalidArgument(
                    f"invalid file override 'file:{rel}': the path must stay within model directory"
                )
            target.write_bytes(content)
    except OSError as e:
        holder.cleanup()
        raise InvalidArgument(
            f"failed to write the file overrides of model '{name}': {e.strerror or e}"
        ) from e
    except BaseException:
        holder.cleanup()
        raise
    return holder, model_dir
