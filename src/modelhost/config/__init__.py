"""Model configuration: read config.pbtxt, fill, normalise and validate it as Triton does, serve its JSON form.

This package knows no backend: the whole pipeline, with each backend's auto-complete hook in it, is
`modelhost.backends.model_config.load_model_config`.
"""

from __future__ import annotations

from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.config.constants import DEFAULT_MAX_BATCH_SIZE
from modelhost.config.files import config_path, parse_config_text, read_config
from modelhost.config.json_form import config_from_json, config_to_json
from modelhost.config.validate import validate_config

__all__ = [
    "DEFAULT_MAX_BATCH_SIZE",
    "ModelConfig",
    "config_from_json",
    "config_path",
    "config_to_json",
    "parse_config_text",
    "read_config",
    "validate_config",
]
