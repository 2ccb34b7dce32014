"""Finding and parsing a model's config.pbtxt (protobuf text format of `inference.ModelConfig`).

`--model-config-name=<name>` selects `<model>/configs/<name>.pbtxt`; when that file is absent, Triton falls
back to `<model>/config.pbtxt`, and so do we.
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format  # type: ignore[import-untyped]
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.errors import ModelConfigError

CONFIG_FILENAME = "config.pbtxt"
CONFIGS_DIRNAME = "configs"


def config_path(model_dir: Path, config_name: str | None) -> Path | None:
    """The config file a model uses, or None when it has none (then auto-complete must build one)."""
    if config_name:
        custom = model_dir / CONFIGS_DIRNAME / f"{config_name}.pbtxt"
        if custom.is_file():
            return custom
    default = model_dir / CONFIG_FILENAME
    if default.is_file():
        return default
    return None


def parse_config_text(text: str, model_name: str, source: str) -> ModelConfig:
    """Parse protobuf text format into a ModelConfig; `source` names the file in error messages."""
    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as err:
        # str(err) is "<line>:<col> : <what>", naming the offending field or token.
        raise ModelConfigError(
            f"failed to read text proto from {source} for model '{model_name}': {err}"
        ) from err
    return config


def read_config(path: Path, model_name: str) -> ModelConfig:
    """Read and parse one config file; unreadable files and syntax errors raise ModelConfigError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise ModelConfigError(
            f"failed to open text file for read {path}: No such file or directory (model '{model_name}')"
        ) from err
    except UnicodeDecodeError as err:
        raise ModelConfigError(
            f"failed to read text proto from {path} for model '{model_name}': not valid UTF-8 ({err.reason})"
        ) from err
    except OSError as err:
        raise ModelConfigError(
            f"failed to open text file for read {path}: {err.strerror or err} (model '{model_name}')"
        ) from err
    return parse_config_text(text, model_name, str(path))


__all__ = ["CONFIGS_DIRNAME", "CONFIG_FILENAME", "config_path", "parse_config_text", "read_config"]
