from __future__ import annotations

import json

import pytest
from google.protobuf import text_format  # type: ignore[import-untyped]
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig, ModelInstanceGroup

from modelhost.backends.model_config import load_model_config
from modelhost.config import config_from_json, config_to_json
from modelhost.errors import ModelConfigError

from .conftest import ModelFactory

RICH = """
name: "rich"
platform: "onnxruntime_onnx"
backend: "onnxruntime"
max_batch_size: 8
version_policy { specific { versions: [1, 3] } }
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, 3 ] reshape { shape: [ -1, 1, 3 ] } } ]
output [ { name: "Y" data_type: TYPE_STRING dims: [ 1 ] reshape { shape: [] } } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy { default_timeout_microseconds: 7 }
  priority_queue_policy { key: 2 value: { max_queue_size: 3 default_timeout_microseconds: 9 } }
}
instance_group [ { name: "g" count: 2 kind: KIND_CPU secondary_devices [ { device_id: 5 } ] } ]
model_warmup [ { name: "w" batch_size: 1 inputs { key: "X" value: { data_type: TYPE_FP32 dims: [ 2, 3 ]
                 zero_data: true } } } ]
parameters { key: "k" value: { string_value: "v" } }
"""


# dynamic_batching, sequence_batching and ensemble_scheduling form one oneof: each gets a config of its own.
SEQUENCE = """
name: "seq"
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  oldest { max_queue_delay_microseconds: 11 }
  state [ { input_name: "s" output_name: "t" data_type: TYPE_INT32 dims: [ 2 ]
            initial_state [ { name: "i" data_type: TYPE_INT32 dims: [ 2 ] zero_data: true } ] } ]
}
"""


def _rich() -> ModelConfig:
    return text_format.Parse(RICH, ModelConfig())


def _sequence() -> ModelConfig:
    return text_format.Parse(SEQUENCE, ModelConfig())


def test_int64_fields_are_numbers() -> None:
    data = config_to_json(_rich())
    assert data["input"][0]["dims"] == [-1, 3]
    assert data["input"][0]["reshape"]["shape"] == [-1, 1, 3]
    assert data["output"][0]["reshape"]["shape"] == []
    assert data["version_policy"]["specific"]["versions"] == [1, 3]
    batching = data["dynamic_batching"]
    assert batching["max_queue_delay_microseconds"] == 100
    assert batching["priority_levels"] == 2
    assert batching["default_priority_level"] == 1
    assert batching["default_queue_policy"]["default_timeout_microseconds"] == 7
    # Map keys stay strings; the values' int64 fields become numbers.
    assert list(batching["priority_queue_policy"]) == ["2"]
    assert batching["priority_queue_policy"]["2"]["default_timeout_microseconds"] == 9
    assert data["model_warmup"][0]["inputs"]["X"]["dims"] == [2, 3]
    assert data["instance_group"][0]["secondary_devices"][0]["device_id"] == 5


def test_int64_fields_of_sequence_batching_and_ensembles() -> None:
    data = config_to_json(_sequence())
    sequence = data["sequence_batching"]
    assert sequence["max_sequence_idle_microseconds"] == 5000000
    assert sequence["oldest"]["max_queue_delay_microseconds"] == 11
    assert sequence["state"][0]["dims"] == [2]
    assert sequence["state"][0]["initial_state"][0]["dims"] == [2]
    ensemble = text_format.Parse("ensemble_scheduling { step [ { model_version: 3 } ] }", ModelConfig())
    assert config_to_json(ensemble)["ensemble_scheduling"]["step"][0]["model_version"] == 3


def test_enums_are_names_and_defaults_printed() -> None:
    data = config_to_json(_rich())
    assert data["input"][0]["data_type"] == "TYPE_FP32"
    assert data["input"][0]["format"] == "FORMAT_NONE"
    assert data["input"][0]["is_shape_tensor"] is False
    assert data["output"][0]["data_type"] == "TYPE_STRING"
    assert data["instance_group"][0]["kind"] == "KIND_CPU"
    assert data["instance_group"][0]["gpus"] == []
    assert data["dynamic_batching"]["default_queue_policy"]["timeout_action"] == "REJECT"
    assert data["runtime"] == ""
    assert data["metric_tags"] == {}
    assert data["parameters"] == {"k": {"string_value": "v"}}
    # Unset sub-messages are not invented.
    assert "ensemble_scheduling" not in data
    assert "response_cache" not in data


def test_no_int64_strings_anywhere() -> None:
    def walk(value: object) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str):
            assert not value.lstrip("-").isdigit(), value

    walk(config_to_json(_rich()))
    walk(config_to_json(_sequence()))


@pytest.mark.parametrize("config", [_rich(), _sequence(), ModelConfig(name="empty")])
def test_round_trip(config: ModelConfig) -> None:
    assert config_from_json(json.dumps(config_to_json(config)), config.name) == config


def test_round_trip_loaded_config(make_model: ModelFactory) -> None:
    config = load_model_config(make_model("simple"))
    data = config_to_json(config)
    assert data["max_batch_size"] == 4
    assert data["input"][0]["dims"] == [16]
    assert data["dynamic_batching"]["preferred_batch_size"] == [4]
    assert data["instance_group"] == [
        {
            "name": "simple",
            "count": 2,
            "kind": "KIND_CPU",
            "gpus": [],
            "secondary_devices": [],
            "profile": [],
            "passive": False,
            "host_policy": "",
        }
    ]
    assert config_from_json(json.dumps(data), "simple") == config


def test_from_json_accepts_camel_case_and_any_enum_case() -> None:
    config = config_from_json(
        '{"name": "m", "maxBatchSize": 2, "input": [{"name": "X", "data_type": "type_fp32", "dims": [3]}],'
        ' "instance_group": [{"kind": "kind_gpu"}]}',
        "m",
    )
    assert config.max_batch_size == 2
    assert config.input[0].data_type == DataType.TYPE_FP32
    assert config.instance_group[0].kind == ModelInstanceGroup.KIND_GPU


def test_from_json_takes_one_value_for_a_repeated_field() -> None:
    # As protobuf's C++ JSON parser in Triton (its L0_lifecycle sends "instance_group": {...}).
    config = config_from_json(
        '{"name": "m", "instance_group": {"kind": "KIND_CPU", "count": 5}, "input": {"name": "X", "dims": 4},'
        ' "parameters": {"p": {"string_value": "v"}}}',
        "m",
    )
    assert [(g.kind, g.count) for g in config.instance_group] == [(ModelInstanceGroup.KIND_CPU, 5)]
    assert [(t.name, list(t.dims)) for t in config.input] == [("X", [4])]
    assert config.parameters["p"].string_value == "v"


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("{bad", r"invalid JSON"),
        ("[1]", r"must be a JSON object"),
        ('{"foo": 1}', r"has no field named \"foo\""),
        ('{"max_batch_size": "x"}', r"max_batch_size"),
        ('{"input": [{"data_type": "TYPE_NOPE"}]}', r"TYPE_NOPE"),
    ],
)
def test_from_json_errors(text: str, pattern: str) -> None:
    with pytest.raises(ModelConfigError, match=pattern) as info:
        config_from_json(text, "m")
    assert "Invalid config override for model 'm'" in str(info.value)
