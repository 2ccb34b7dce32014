"""FIL auto-complete (a modelhost addition): what the model file says, filled in only where the config is silent."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import pytest
from tritonclient.grpc.model_config_pb2 import DataType

from modelhost.backends.model_config import load_model_config
from modelhost.errors import ModelConfigError

from .conftest import LoadInstance, MakeModel
from .fil_models import FEATURES, config_text, lightgbm_model, save, xgboost_model


def ios(tensors: Iterable[Any]) -> list[tuple[str, str, list[int]]]:
    return [(t.name, DataType.Name(t.data_type), list(t.dims)) for t in tensors]


def params(config: Any) -> dict[str, str]:
    return {k: v.string_value for k, v in config.parameters.items()}


def test_a_bare_config_is_completed(make_model: MakeModel, caplog: pytest.LogCaptureFixture) -> None:
    model = make_model(
        "clf",
        xgboost_model("binary:logistic"),
        "xgboost_ubj",
        config_text("xgboost_ubj", features=None, output_dims=None, max_batch_size=0),
    )
    with caplog.at_level(logging.WARNING):
        config = load_model_config(model)
    assert params(config) == {"model_type": "xgboost_ubj", "is_classifier": "true"}
    assert config.max_batch_size == 4
    assert "autofilled max_batch_size to 4 for model 'clf'" in caplog.text
    assert config.HasField("dynamic_batching")
    assert ios(config.input) == [("input__0", "TYPE_FP32", [FEATURES])]
    assert ios(config.output) == [("output__0", "TYPE_FP32", [1])]


@pytest.mark.parametrize(
    ("booster", "model_type", "extra_params", "classifier", "dims"),
    [
        (xgboost_model("reg:squarederror"), "xgboost_json", {}, "false", [1]),
        (xgboost_model("multi:softprob", classes=3), "xgboost_json", {"predict_proba": "true"}, "true", [3]),
        (xgboost_model("multi:softprob", classes=3), "xgboost_json", {}, "true", [1]),
        (xgboost_model("binary:logistic"), "xgboost", {"predict_proba": "true"}, "true", [1]),
        (lightgbm_model("multiclass", classes=4), "lightgbm", {"predict_proba": "true"}, "true", [4]),
        (lightgbm_model("regression"), "lightgbm", {}, "false", [1]),
        (
            xgboost_model("multi:softmax", classes=3),
            "treelite_checkpoint",
            {"predict_proba": "true"},
            "true",
            [3],
        ),
        (lightgbm_model("regression"), "treelite_checkpoint", {}, "false", [1]),
    ],
)
def test_every_model_type_is_read(
    booster: Any,
    model_type: str,
    extra_params: dict[str, str],
    classifier: str,
    dims: list[int],
    make_model: MakeModel,
) -> None:
    text = config_text(model_type, features=None, output_dims=None, **extra_params)
    config = load_model_config(make_model("m", booster, model_type, text))
    assert params(config)["is_classifier"] == classifier
    assert config.max_batch_size == 64  # given: kept
    assert ios(config.input) == [("input__0", "TYPE_FP32", [FEATURES])]
    assert ios(config.output) == [("output__0", "TYPE_FP32", dims)]


def test_what_the_config_says_is_kept(make_model: MakeModel) -> None:
    text = config_text("xgboost_json", output_dims=(2,), is_classifier="true", predict_proba="true")
    config = load_model_config(make_model("m", xgboost_model("binary:logistic"), "xgboost_json", text))
    assert ios(config.output) == [("output__0", "TYPE_FP32", [2])]
    assert not config.HasField("dynamic_batching")  # inputs and outputs were given: batching untouched
    # A regressor's config saying is_classifier true (or the old output_class) is the user's call.
    text = config_text("xgboost_json", output_class="true")
    config = load_model_config(make_model("old", xgboost_model("reg:squarederror"), "xgboost_json", text))
    assert "is_classifier" not in params(config)


def test_a_complete_config_does_not_read_the_model(make_model: MakeModel) -> None:
    model = make_model(
        "m",
        xgboost_model("binary:logistic"),
        "xgboost_json",
        config_text("xgboost_json", is_classifier="true"),
    )
    (model / "1" / "xgboost.json").write_text("not a model")
    assert params(load_model_config(model))["is_classifier"] == "true"


def test_only_is_classifier_is_filled_when_inputs_and_outputs_are_given(make_model: MakeModel) -> None:
    model = make_model(
        "m",
        xgboost_model("reg:squarederror"),
        "xgboost_json",
        config_text("xgboost_json", max_batch_size=0, output_dims=(-1, 1)),
    )
    config = load_model_config(model)
    assert params(config)["is_classifier"] == "false"
    assert config.max_batch_size == 0


def test_the_highest_version_is_read(make_model: MakeModel) -> None:
    model = make_model(
        "m", xgboost_model("reg:squarederror"), "xgboost_json", config_text("xgboost_json", features=None)
    )
    save(xgboost_model("reg:squarederror", features=4), model / "3" / "xgboost.json", "xgboost_json")
    config = load_model_config(model)
    assert ios(config.input) == [("input__0", "TYPE_FP32", [4])]


def test_default_model_filename_is_read(make_model: MakeModel) -> None:
    text = config_text("lightgbm", output_dims=None, extra='default_model_filename: "gbm.txt"')
    config = load_model_config(
        make_model("m", lightgbm_model("binary"), "lightgbm", text, filename="gbm.txt")
    )
    assert ios(config.output) == [("output__0", "TYPE_FP32", [1])]


def test_no_model_file_and_no_inputs(make_model: MakeModel) -> None:
    model = make_model(
        "m", xgboost_model("reg:squarederror"), "xgboost_json", config_text("lightgbm", features=None)
    )
    with pytest.raises(
        ModelConfigError,
        match=r"unable to autofill for 'm': no version directory of .* contains 'model.txt' \(model_type 'lightgbm'\)",
    ):
        load_model_config(model)


def test_a_corrupt_file_fails_auto_complete_with_its_reason(make_model: MakeModel) -> None:
    model = make_model(
        "m", xgboost_model("reg:squarederror"), "xgboost_json", config_text("xgboost_json", features=None)
    )
    (model / "1" / "xgboost.json").write_text("{ broken")
    with pytest.raises(ModelConfigError, match="failed to read xgboost_json model file"):
        load_model_config(model)


def test_auto_complete_off_fills_nothing(make_model: MakeModel, load_instance: LoadInstance) -> None:
    text = config_text("xgboost_json", features=None, is_classifier="false")
    bare = make_model("bare", xgboost_model("reg:squarederror"), "xgboost_json", text)
    assert not load_model_config(bare, auto_complete=False).input
    with pytest.raises(
        ModelConfigError, match=r"model input\(s\) \['input__0'\] are missing from the configuration"
    ):
        load_instance(bare, auto_complete=False)
