"""Triton's JSON form of a ModelConfig (GET /v2/models/<m>/config) and its inverse (config overrides).

The JSON form is protobuf's JSON mapping with the original field names, every field without presence printed
(empty strings, zeros, [] and {} included), enums as their names, and 64-bit integers as JSON numbers instead
of protobuf's strings. Map keys stay strings, as JSON requires.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format  # type: ignore[import-untyped]
from google.protobuf.descriptor import Descriptor, FieldDescriptor  # type: ignore[import-untyped]
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.errors import ModelConfigError

_INT64_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)


Transform = Callable[[FieldDescriptor, Any], Any]


def _is_map(field: FieldDescriptor) -> bool:
    return bool(field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry)


def _walk(descriptor: Descriptor, data: dict[str, Any], transform: Transform) -> None:
    """Apply `transform` in place to every scalar value of a message's JSON dict, nested messages included.

    Keys may be proto field names or their JSON (camelCase) names; unknown keys are left for the parser.
    """
    for key, value in data.items():
        field = descriptor.fields_by_name.get(key) or descriptor.fields_by_camelcase_name.get(key)
        if field is None:
            continue
        if _is_map(field) and isinstance(value, dict):
            value_field = field.message_type.fields_by_name["value"]
            data[key] = {k: _walk_value(value_field, v, transform) for k, v in value.items()}
        elif field.is_repeated and isinstance(value, list):
            data[key] = [_walk_value(field, item, transform) for item in value]
        elif field.is_repeated and not _is_map(field):
            # One value for a repeated field is a list of one: protobuf's C++ JSON parser, which Triton uses,
            # takes it so (Triton's L0_lifecycle sends "instance_group": {...}).
            data[key] = [_walk_value(field, value, transform)]
        else:
            data[key] = _walk_value(field, value, transform)


def _walk_value(field: FieldDescriptor, value: Any, transform: Transform) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if isinstance(value, dict):
            _walk(field.message_type, value, transform)
        return value
    return transform(field, value)


def _int64_as_number(field: FieldDescriptor, value: Any) -> Any:
    if field.type in _INT64_TYPES and isinstance(value, str):
        return int(value)
    return value


def _enum_as_declared(field: FieldDescriptor, value: Any) -> Any:
    """Enum names in any case, as Triton parses with case_insensitive_enum_parsing."""
    if field.type == FieldDescriptor.TYPE_ENUM and isinstance(value, str):
        for name in field.enum_type.values_by_name:
            if name.upper() == value.upper():
                return name
    return value


def config_to_json(config: ModelConfig) -> dict[str, Any]:
    """The config as Triton serves it over HTTP: a dict ready for json.dumps."""
    data: dict[str, Any] = json_format.MessageToDict(
        config, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    _walk(config.DESCRIPTOR, data, _int64_as_number)
    return data


def config_from_json(text: str, model_name: str) -> ModelConfig:
    """Parse Triton's JSON form (as sent in a load request's "config" parameter) into a ModelConfig."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise ModelConfigError(
            f"Invalid config override for model '{model_name}': invalid JSON: {err}"
        ) from err
    if not isinstance(data, dict):
        raise ModelConfigError(
            f"Invalid config override for model '{model_name}': the configuration must be a JSON object, "
            f"got {type(data).__name__}"
        )
    config = ModelConfig()
    try:
        _walk(config.DESCRIPTOR, data, _enum_as_declared)
        json_format.ParseDict(data, config, ignore_unknown_fields=False)
    except json_format.ParseError as err:
        raise ModelConfigError(f"Invalid config override for model '{model_name}': {err}") from err
    return config


__all__ = ["config_from_json", "config_to_json"]
