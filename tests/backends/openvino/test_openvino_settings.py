"""The openvino backend's parameters, and the compile properties they (and their absence) give."""

from __future__ import annotations

import logging

import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.backends.openvino.settings import OpenVINOSettings, compile_properties, read_settings
from modelhost.errors import ModelConfigError

CPU_PROPERTIES = [
    "NUM_STREAMS",
    "INFERENCE_NUM_THREADS",
    "ENABLE_CPU_PINNING",
    "PERFORMANCE_HINT",
    "INFERENCE_PRECISION_HINT",
]


def _config(**parameters: str) -> ModelConfig:
    config = ModelConfig(name="m")
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    return config


def test_defaults() -> None:
    assert read_settings(_config()) == OpenVINOSettings()


def test_every_parameter_as_triton_spells_it() -> None:
    config = text_format.Parse(
        """
        name: "m"
        parameters [
          { key: "PERFORMANCE_HINT" value: { string_value: "throughput" } },
          { key: "NUM_STREAMS" value: { string_value: "numa" } },
          { key: "INFERENCE_NUM_THREADS" value: { string_value: "3" } },
          { key: "COMPILATION_NUM_THREADS" value: { string_value: "2" } },
          { key: "HINT_BF16" value: { string_value: "YES" } },
          { key: "CPU_EXTENSION_PATH" value: { string_value: "/opt/ext.so" } },
          { key: "SKIP_OV_DYNAMIC_BATCHSIZE" value: { string_value: "yes" } },
          { key: "ENABLE_BATCH_PADDING" value: { string_value: "Yes" } },
          { key: "RESHAPE_IO_LAYERS" value: { string_value: "YES" } },
          { key: "TARGET_DEVICE" value: { string_value: "auto:cpu" } }
        ]
        """,
        ModelConfig(),
    )
    assert read_settings(config) == OpenVINOSettings(
        target_device="AUTO:CPU",
        performance_hint="THROUGHPUT",
        num_streams="NUMA",
        inference_threads=3,
        compilation_threads=2,
        bf16=True,
        cpu_extension="/opt/ext.so",
        skip_dynamic_batch=True,
        batch_padding=True,
        reshape_io=True,
    )


@pytest.mark.parametrize(("value", "expected"), [("AUTO", "AUTO"), ("4", "4"), ("04", "4"), ("0", "0")])
def test_num_streams(value: str, expected: str) -> None:
    assert read_settings(_config(NUM_STREAMS=value)).num_streams == expected


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("NUM_STREAMS", "-1", "parameter 'NUM_STREAMS' must be AUTO, NUMA or a number of streams, got '-1'"),
        ("NUM_STREAMS", "many", "parameter 'NUM_STREAMS' must be AUTO, NUMA or a number of streams"),
        ("PERFORMANCE_HINT", "fast", "parameter 'PERFORMANCE_HINT' must be one of LATENCY, THROUGHPUT"),
        ("INFERENCE_NUM_THREADS", "two", "parameter 'INFERENCE_NUM_THREADS' must be an integer"),
        ("INFERENCE_NUM_THREADS", "-2", "parameter 'INFERENCE_NUM_THREADS' must be >= 0"),
        ("COMPILATION_NUM_THREADS", "x", "parameter 'COMPILATION_NUM_THREADS' must be an integer"),
        ("HINT_BF16", "maybe", "parameter 'HINT_BF16' must be 'true' or 'false'"),
        ("RESHAPE_IO_LAYERS", "sure", "parameter 'RESHAPE_IO_LAYERS' must be 'true' or 'false'"),
    ],
)
def test_bad_values_name_the_parameter(key: str, value: str, message: str) -> None:
    with pytest.raises(ModelConfigError, match=message):
        read_settings(_config(**{key: value}))


def test_f32_unless_hint_bf16_says_yes() -> None:
    assert compile_properties(OpenVINOSettings(), "m", 1, CPU_PROPERTIES)["INFERENCE_PRECISION_HINT"] == "f32"


def test_hint_bf16_no_asks_for_f32() -> None:
    settings = read_settings(_config(HINT_BF16="NO"))
    assert compile_properties(settings, "m", 1, CPU_PROPERTIES)["INFERENCE_PRECISION_HINT"] == "f32"
    settings = read_settings(_config(HINT_BF16="yes"))
    assert compile_properties(settings, "m", 1, CPU_PROPERTIES)["INFERENCE_PRECISION_HINT"] == "bf16"


def test_defaults_one_stream_per_instance_and_the_cpu_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("modelhost.backends.cpu_threads.cpu_count", lambda: 9)
    properties = compile_properties(OpenVINOSettings(), "m", 2, CPU_PROPERTIES)
    # (9 - 1) // 2 = 4 threads per instance, 2 streams of them.
    assert properties == {
        "NUM_STREAMS": "2",
        "INFERENCE_NUM_THREADS": "8",
        "INFERENCE_PRECISION_HINT": "f32",
        "ENABLE_CPU_PINNING": "NO",
    }


def test_set_values_win(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = OpenVINOSettings(num_streams="AUTO", inference_threads=0, cpu_pinning=True, bf16=True)
    properties = compile_properties(settings, "m", 3, CPU_PROPERTIES)
    assert properties == {
        "NUM_STREAMS": "AUTO",
        "INFERENCE_NUM_THREADS": "0",
        "INFERENCE_PRECISION_HINT": "bf16",
        "ENABLE_CPU_PINNING": "YES",
    }


def test_a_performance_hint_leaves_the_streams_to_openvino() -> None:
    properties = compile_properties(OpenVINOSettings(performance_hint="THROUGHPUT"), "m", 2, CPU_PROPERTIES)
    assert properties["PERFORMANCE_HINT"] == "THROUGHPUT"
    assert "NUM_STREAMS" not in properties


def test_a_device_that_does_not_say_gets_only_what_the_config_sets() -> None:
    settings = OpenVINOSettings(performance_hint="LATENCY", compilation_threads=2)
    assert compile_properties(settings, "m", 2, None) == {
        "PERFORMANCE_HINT": "LATENCY",
        "COMPILATION_NUM_THREADS": "2",
    }


def test_compilation_threads_ignored_where_the_device_does_not_take_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        properties = compile_properties(OpenVINOSettings(compilation_threads=2), "m", 1, CPU_PROPERTIES)
    assert "COMPILATION_NUM_THREADS" not in properties
    assert "OpenVINO device CPU does not take COMPILATION_NUM_THREADS; parameter ignored" in caplog.text
