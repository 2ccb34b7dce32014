"""FIL's parameters: values, defaults, old and removed names, the CPU thread budget."""

from __future__ import annotations

import logging

import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.backends.fil.settings import read_settings, require_is_classifier
from modelhost.errors import ModelConfigError
from modelhost.host.devices import cpu_count


def config(**params: str) -> ModelConfig:
    parsed = ModelConfig(name="m", backend="fil")
    for key, value in params.items():
        parsed.parameters[key].string_value = value
    return parsed


def test_defaults_are_fils() -> None:
    settings = read_settings(config())
    assert settings.model_type == "xgboost"
    assert settings.is_classifier is None
    assert not settings.predict_proba
    assert settings.threshold == 0.5
    assert settings.cpu_nthread is None
    assert not settings.xgboost_allow_unknown_field
    assert settings.transfer_threshold == 0
    assert settings.layout == "depth_first"
    assert settings.chunk_size == 1
    assert not settings.use_experimental_optimizations


def test_every_parameter_is_read() -> None:
    settings = read_settings(
        config(
            model_type="lightgbm",
            is_classifier="true",
            predict_proba="true",
            threshold="0.3",
            cpu_nthread="3",
            xgboost_allow_unknown_field="true",
            transfer_threshold="2",
            layout="layered",
            chunk_size="4",
            use_experimental_optimizations="true",
        )
    )
    assert (settings.model_type, settings.is_classifier, settings.predict_proba) == ("lightgbm", True, True)
    assert (settings.threshold, settings.cpu_nthread, settings.transfer_threshold) == (
        pytest.approx(0.3),
        3,
        2,
    )
    assert (settings.layout, settings.chunk_size) == ("layered", 4)
    assert settings.xgboost_allow_unknown_field and settings.use_experimental_optimizations


def test_parameters_in_a_config_file_are_read() -> None:
    parsed = text_format.Parse(
        'name: "m" backend: "fil" parameters [ { key: "model_type" value: { string_value: "xgboost_ubj" } } ]',
        ModelConfig(),
    )
    assert read_settings(parsed).model_type == "xgboost_ubj"


@pytest.mark.parametrize(
    ("params", "words"),
    [
        (
            {"model_type": "pickle"},
            "parameter 'model_type' must be one of xgboost, xgboost_json, xgboost_ubj",
        ),
        ({"is_classifier": "maybe"}, "parameter 'is_classifier' must be 'true' or 'false', got 'maybe'"),
        ({"threshold": "high"}, "parameter 'threshold' must be a number, got 'high'"),
        ({"cpu_nthread": "all"}, "parameter 'cpu_nthread' must be an integer, got 'all'"),
        ({"layout": "diagonal"}, "parameter 'layout' must be one of depth_first, breadth_first, layered"),
        ({"transfer_threshold": "-1"}, "parameter 'transfer_threshold' must be >= 0, got -1"),
    ],
)
def test_bad_values_name_the_parameter(params: dict[str, str], words: str) -> None:
    with pytest.raises(ModelConfigError, match="model 'm'") as caught:
        read_settings(config(**params))
    assert words in str(caught.value)


def test_is_classifier_is_required_at_load() -> None:
    settings = read_settings(config())
    with pytest.raises(ModelConfigError, match="required parameter 'is_classifier' not found in config"):
        require_is_classifier(config(), settings)
    assert require_is_classifier(config(), read_settings(config(is_classifier="false"))) is False


def test_output_class_is_honoured_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        settings = read_settings(config(output_class="true"))
    assert settings.is_classifier is True
    assert "fil parameter 'output_class' is no longer used" in caplog.text
    assert "replaced by 'is_classifier'" in caplog.text


def test_output_class_wins_over_is_classifier_as_in_triton() -> None:
    assert read_settings(config(output_class="false", is_classifier="true")).is_classifier is False
    # Triton honours output_class only when it reads "true" or "false".
    assert read_settings(config(output_class="yes please", is_classifier="true")).is_classifier is True


@pytest.mark.parametrize("key", ["algo", "threads_per_tree", "storage_type", "blocks_per_sm"])
def test_replaced_and_removed_parameters_are_accepted_with_a_warning(
    key: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        read_settings(config(**{key: "1"}))
    assert f"model 'm': fil parameter '{key}' is no longer used" in caplog.text


def test_chunk_size_below_one_means_one() -> None:
    assert read_settings(config(chunk_size="0")).chunk_size == 1


def test_threads_default_to_a_share_of_the_cores() -> None:
    settings = read_settings(config())
    assert settings.threads(1) == max(1, cpu_count() - 1)
    assert settings.threads(64) == 1


@pytest.mark.parametrize("value", ["-1", "0", "-7"])
def test_cpu_nthread_zero_or_below_means_every_core(value: str) -> None:
    assert read_settings(config(cpu_nthread=value)).threads(4) == cpu_count()


def test_cpu_nthread_from_the_backend_config() -> None:
    assert read_settings(config(), {"cpu_nthread": "5"}).threads(1) == 5
    assert read_settings(config(), {"cpu_nthread": "0"}).threads(1) == cpu_count()
    # The model's own parameter wins.
    assert read_settings(config(cpu_nthread="2"), {"cpu_nthread": "5"}).threads(1) == 2
