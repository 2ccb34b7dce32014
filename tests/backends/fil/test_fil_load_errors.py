"""Loads FIL refuses, each with its reason: bad files, configs that contradict the model, missing libraries."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import xgboost as xgb

from modelhost.backends.fil.backend import FilBackend
from modelhost.backends.model_config import load_model_config
from modelhost.errors import ModelConfigError

from .conftest import LoadInstance, MakeModel, context
from .fil_models import FEATURES, MODEL_FILES, config_text, lightgbm_model, rows, xgboost_model

GARBAGE = b"\x00\x01 this is not a model \xff" * 8


@pytest.mark.parametrize(
    ("model_type", "content", "words"),
    [
        ("xgboost", GARBAGE, "failed to read xgboost model file"),
        ("xgboost_json", b'{"learner": {"broken', "failed to read xgboost_json model file"),
        ("xgboost_ubj", b"{Lgarbage", "failed to read xgboost_ubj model file"),
        ("lightgbm", b"tree\nnot really\n", "failed to read lightgbm model file"),
        ("treelite_checkpoint", GARBAGE, "failed to read treelite_checkpoint model file"),
    ],
)
def test_corrupt_model_files(
    model_type: str, content: bytes, words: str, make_model: MakeModel, load_instance: LoadInstance
) -> None:
    model = make_model(
        "bad",
        xgboost_model("reg:squarederror"),
        "xgboost_json",
        config_text(model_type, is_classifier="false"),
    )
    (model / "1" / MODEL_FILES[model_type]).write_bytes(content)
    with pytest.raises(ModelConfigError, match="unable to load model 'bad'") as caught:
        load_instance(model)
    assert words in str(caught.value)
    assert "[bt]" not in str(caught.value)  # no C++ stack trace in the reason


@pytest.mark.parametrize(
    ("model_type", "saved_as", "hint"),
    [
        ("xgboost", "xgboost_ubj", "set the parameter model_type to 'xgboost_ubj' (or 'xgboost_json')"),
        (
            "xgboost_json",
            "xgboost_ubj",
            "is an XGBoost UBJSON model, not JSON (model_type 'xgboost_json'): "
            "set the parameter model_type to 'xgboost_ubj'",
        ),
        ("xgboost_ubj", "xgboost_json", "set the parameter model_type to 'xgboost_json'"),
        (
            "xgboost_json",
            "xgboost",
            "is not an XGBoost JSON or UBJSON model (model_type 'xgboost_json'): "
            "model_type 'xgboost' reads XGBoost's legacy binary format",
        ),
    ],
)
def test_a_file_in_another_format_names_the_right_model_type(
    model_type: str, saved_as: str, hint: str, make_model: MakeModel, load_instance: LoadInstance
) -> None:
    booster = xgboost_model("reg:squarederror")
    config = config_text(model_type, is_classifier="false")
    model = make_model("other", booster, saved_as, config, filename=MODEL_FILES[model_type])
    with pytest.raises(ModelConfigError, match="unable to load model 'other'") as caught:
        load_instance(model)
    assert hint in str(caught.value)


def test_missing_model_file(make_model: MakeModel, load_instance: LoadInstance) -> None:
    model = make_model(
        "m", xgboost_model("reg:squarederror"), "xgboost_json", config_text("lightgbm", is_classifier="false")
    )
    with pytest.raises(
        ModelConfigError, match=r"model file '.*/m/1/model.txt' not found \(model_type 'lightgbm'\)"
    ):
        load_instance(model)


def test_default_model_filename_is_honoured(make_model: MakeModel, load_instance: LoadInstance) -> None:
    booster = xgboost_model("reg:squarederror")
    config = config_text("xgboost_json", is_classifier="false", extra='default_model_filename: "trees.json"')
    model = make_model("named", booster, "xgboost_json", config, filename="trees.json")
    np.testing.assert_allclose(
        load_instance(model).execute({"input__0": rows(3)}, ["output__0"])["output__0"],
        booster.inplace_predict(rows(3)),
        rtol=1e-5,
    )
    # A default_model_filename naming a directory: the model_type's file inside it, as in FIL.
    config = config_text("xgboost_json", is_classifier="false", extra='default_model_filename: "model_dir"')
    model = make_model("in_dir", booster, "xgboost_json", config, filename="model_dir/xgboost.json")
    assert load_instance(model).forest.facts.n_features == FEATURES


@pytest.mark.parametrize(
    ("config_kwargs", "words"),
    [
        (
            {"features": 5},
            "input 'input__0' has dims [ 5 ] in the configuration, but the model takes 6 features (dims [ 6 ])",
        ),
        (
            {"output_dims": (3,)},
            "output 'output__0' has dims [ 3 ] (3 value(s) per row) in the configuration, but a classifier "
            "without predict_proba gives 1 value per row (the class index): its dims must be [ 1 ]",
        ),
        (
            {"output_dims": (3,), "predict_proba": "true"},
            "a binary classifier with predict_proba gives 1 value per row (the positive class's probability) "
            "or 2 (both classes' probabilities): its dims must be [ 1 ] or [ 2 ]",
        ),
        (
            {"output_dims": (-1,)},
            "output 'output__0' has dims [ -1 ] per row in the configuration; FIL outputs have fixed dims",
        ),
        (
            {"output_dims": None, "shap_dims": (7,)},
            "the configuration has no output 'output__0', which FIL always writes",
        ),
        (
            {"shap_dims": (6,)},
            "output 'treeshap_output' has dims [ 6 ] in the configuration, but the model gives 7 SHAP values "
            "per row (1 class(es) x (6 features + the bias)): its dims must be [ 7 ]",
        ),
    ],
)
def test_configs_that_contradict_the_model(
    config_kwargs: dict[str, object], words: str, make_model: MakeModel, load_instance: LoadInstance
) -> None:
    config = config_text("xgboost_json", is_classifier="true", **config_kwargs)  # type: ignore[arg-type]
    model = make_model("m", xgboost_model("binary:logistic"), "xgboost_json", config)
    with pytest.raises(ModelConfigError, match="unable to load model 'm'") as caught:
        load_instance(model)
    assert words in str(caught.value)


def test_class_count_is_checked(make_model: MakeModel, load_instance: LoadInstance) -> None:
    config = config_text("lightgbm", output_dims=(4,), is_classifier="true", predict_proba="true")
    model = make_model("m", lightgbm_model("multiclass", classes=3), "lightgbm", config)
    with pytest.raises(
        ModelConfigError,
        match=r"a 3-class classifier with predict_proba gives 3 values per row: its dims must be \[ 3 \]",
    ):
        load_instance(model)


def test_names_and_datatypes_are_checked(make_model: MakeModel, load_instance: LoadInstance) -> None:
    booster = xgboost_model("reg:squarederror")
    wrong_type = config_text("xgboost_json", is_classifier="false").replace(
        "TYPE_FP32 dims: [ 1 ]", "TYPE_INT32 dims: [ 1 ]"
    )
    with pytest.raises(
        ModelConfigError,
        match="configuration expects datatype TYPE_INT32 for output 'output__0', model provides TYPE_FP32",
    ):
        load_instance(make_model("int", booster, "xgboost_json", wrong_type))
    wrong_name = config_text("xgboost_json", is_classifier="false").replace('"input__0"', '"features"')
    with pytest.raises(
        ModelConfigError,
        match=r"configuration expects input 'features' but the model has only \['input__0'\]",
    ):
        load_instance(make_model("name", booster, "xgboost_json", wrong_name))


@pytest.mark.parametrize("model_type", ["xgboost", "treelite_checkpoint"])
def test_shap_is_refused_where_no_library_computes_it(
    model_type: str, make_model: MakeModel, load_instance: LoadInstance
) -> None:
    config = config_text(model_type, shap_dims=(FEATURES + 1,), is_classifier="true")
    model = make_model("m", xgboost_model("binary:logistic"), model_type, config)
    with pytest.raises(
        ModelConfigError,
        match=f"output 'treeshap_output': no library modelhost uses computes SHAP values for model_type '{model_type}'",
    ):
        load_instance(model)


def test_is_classifier_is_required_without_auto_complete(
    make_model: MakeModel, load_instance: LoadInstance
) -> None:
    model = make_model("m", xgboost_model("binary:logistic"), "xgboost_json", config_text("xgboost_json"))
    with pytest.raises(ModelConfigError, match="required parameter 'is_classifier' not found in config"):
        load_instance(model, auto_complete=False)
    assert load_instance(model).plan.classifier  # auto-complete fills it from the objective


def test_gpu_instances_need_a_gpu(make_model: MakeModel, load_instance: LoadInstance) -> None:
    config = config_text("xgboost_json", is_classifier="false", extra="instance_group [ { kind: KIND_GPU } ]")
    model = make_model("m", xgboost_model("reg:squarederror"), "xgboost_json", config)
    parsed = load_model_config(model, gpu_count=1)  # a GPU at config time, none at load
    with pytest.raises(
        ModelConfigError, match="instance group kind KIND_GPU needs a GPU, and none is visible"
    ):
        FilBackend().load_instance(context(model, parsed, gpu_count=0), parsed.instance_group[0], 0, 0)


def test_gpu_instances_of_types_without_a_gpu_predictor_run_on_cpu(
    make_model: MakeModel, caplog: pytest.LogCaptureFixture
) -> None:
    config = config_text("lightgbm", is_classifier="false", extra="instance_group [ { kind: KIND_GPU } ]")
    model = make_model("m", lightgbm_model("regression"), "lightgbm", config)
    parsed = load_model_config(model, gpu_count=1)
    instance = FilBackend().load_instance(context(model, parsed, gpu_count=1), parsed.instance_group[0], 0, 0)
    try:
        assert (
            "KIND_GPU instance on GPU 0 predicts on CPU: modelhost has no GPU predictor for model_type 'lightgbm'"
            in caplog.text
        )
        assert instance.execute({"input__0": rows(2)}, ["output__0"])["output__0"].shape == (2,)
    finally:
        instance.close()


def test_a_missing_library_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, make_model: MakeModel, load_instance: LoadInstance
) -> None:
    model = make_model(
        "m", lightgbm_model("regression"), "lightgbm", config_text("lightgbm", is_classifier="false")
    )
    monkeypatch.setitem(sys.modules, "lightgbm", None)  # the import then fails as if not installed
    monkeypatch.delitem(sys.modules, "modelhost.backends.fil.lightgbm_forest", raising=False)
    with pytest.raises(ModelConfigError) as caught:
        load_instance(model)
    assert str(caught.value) == (
        "unable to load model 'm': model_type 'lightgbm' needs the Python package 'lightgbm', which is not "
        "installed; install it with: pip install 'modelhost[fil]'"
    )


def test_multi_target_models_are_refused(make_model: MakeModel, load_instance: LoadInstance) -> None:
    data = rows(200)
    booster = xgb.train(
        {"objective": "reg:squarederror", "nthread": 1}, xgb.DMatrix(data, np.nan_to_num(data[:, :2])), 3
    )
    config = config_text("xgboost_json", output_dims=(2,), is_classifier="false")
    with pytest.raises(
        ModelConfigError, match="the model has 2 targets, and FIL serves single-target models only"
    ):
        load_instance(make_model("m", booster, "xgboost_json", config))


def test_linear_boosters_are_refused(
    make_model: MakeModel, load_instance: LoadInstance, tmp_path: Path
) -> None:
    data = rows(200)
    booster = xgb.train(
        {"booster": "gblinear", "nthread": 1}, xgb.DMatrix(data, np.nan_to_num(data[:, 0])), 3
    )
    with pytest.raises(
        ModelConfigError, match="FIL serves tree models, and this XGBoost model's booster is 'gblinear'"
    ):
        load_instance(
            make_model("m", booster, "xgboost_json", config_text("xgboost_json", is_classifier="false"))
        )
