"""Instances answer as FIL does, compared with each library's own prediction (FP32 tolerance)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import treelite
import xgboost as xgb

from modelhost.backends.fil.xgboost_forest import XGBoostForest
from modelhost.errors import BackendInvalidArgument

from .conftest import LoadInstance, MakeModel
from .fil_models import FEATURES, config_text, lightgbm_model, rows, xgboost_model

X = rows(64)
TOL = {"rtol": 1e-5, "atol": 1e-6}


def softmax(margins: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
    exp = np.exp(margins - margins.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)  # type: ignore[no-any-return]


def predict(instance: object, data: np.ndarray, name: str = "output__0") -> np.ndarray:  # type: ignore[type-arg]
    result: np.ndarray = instance.execute({"input__0": data}, [name])[name]  # type: ignore[attr-defined,type-arg]
    assert result.dtype == np.float32
    return result


@pytest.mark.parametrize("model_type", ["xgboost_json", "xgboost_ubj", "xgboost"])
def test_xgboost_regressor(model_type: str, make_model: MakeModel, load_instance: LoadInstance) -> None:
    booster = xgboost_model("reg:squarederror")
    model = make_model("reg", booster, model_type, config_text(model_type, is_classifier="false"))
    answer = predict(load_instance(model), X)
    assert answer.shape == (64,)  # dims [ 1 ]: FIL answers [batch]
    np.testing.assert_allclose(answer, booster.inplace_predict(X), **TOL)


@pytest.mark.parametrize("model_type", ["xgboost_json", "xgboost_ubj", "xgboost"])
def test_xgboost_binary_classifier(
    model_type: str, make_model: MakeModel, load_instance: LoadInstance
) -> None:
    booster = xgboost_model("binary:logistic")
    probability = booster.inplace_predict(X)
    config = config_text(model_type, is_classifier="true")
    answer = predict(load_instance(make_model("clf", booster, model_type, config)), X)
    np.testing.assert_array_equal(answer, (probability > 0.5).astype(np.float32))
    assert 0 < answer.sum() < 64


def test_xgboost_binary_threshold(make_model: MakeModel, load_instance: LoadInstance) -> None:
    booster = xgboost_model("binary:logistic")
    config = config_text("xgboost_json", is_classifier="true", threshold="0.8")
    answer = predict(load_instance(make_model("clf", booster, "xgboost_json", config)), X)
    np.testing.assert_array_equal(answer, (booster.inplace_predict(X) > 0.8).astype(np.float32))


@pytest.mark.parametrize(("dims", "shape"), [((1,), (64,)), ((2,), (64, 2))])
def test_xgboost_binary_predict_proba(
    dims: tuple[int], shape: tuple[int, ...], make_model: MakeModel, load_instance: LoadInstance
) -> None:
    booster = xgboost_model("binary:logistic")
    config = config_text("xgboost_ubj", output_dims=dims, is_classifier="true", predict_proba="true")
    answer = predict(load_instance(make_model("clf", booster, "xgboost_ubj", config)), X)
    assert answer.shape == shape
    p = booster.inplace_predict(X)
    expected = p if dims == (1,) else np.stack([1 - p, p], axis=1)
    np.testing.assert_allclose(answer, expected, **TOL)


@pytest.mark.parametrize("objective", ["multi:softprob", "multi:softmax"])
def test_xgboost_multiclass(objective: str, make_model: MakeModel, load_instance: LoadInstance) -> None:
    booster = xgboost_model(objective, classes=3)
    probabilities = softmax(booster.inplace_predict(X, predict_type="margin"))
    proba = config_text("xgboost_json", output_dims=(3,), is_classifier="true", predict_proba="true")
    answer = predict(load_instance(make_model("proba", booster, "xgboost_json", proba)), X)
    np.testing.assert_allclose(answer, probabilities, **TOL)
    classes = predict(
        load_instance(
            make_model("cls", booster, "xgboost_json", config_text("xgboost_json", is_classifier="true"))
        ),
        X,
    )
    np.testing.assert_array_equal(classes, probabilities.argmax(axis=1))
    assert len(set(classes.tolist())) == 3


def test_xgboost_small_batches_go_to_gtil_and_agree(
    make_model: MakeModel, load_instance: LoadInstance
) -> None:
    booster = xgboost_model("binary:logistic", rounds=20)
    config = config_text("xgboost_json", is_classifier="true", predict_proba="true")
    instance = load_instance(make_model("clf", booster, "xgboost_json", config))
    forest = instance.forest
    assert isinstance(forest, XGBoostForest) and forest.small is not None
    assert forest.small_rows == 100  # 2000 tree-rows / 20 trees
    expected = booster.inplace_predict(X)
    one_by_one = np.concatenate([predict(instance, X[i : i + 1]) for i in range(8)])
    np.testing.assert_allclose(one_by_one, expected[:8], **TOL)
    np.testing.assert_allclose(predict(instance, np.tile(X, (4, 1))), np.tile(expected, 4), **TOL)


def test_xgboost_large_models_have_no_gtil_copy(make_model: MakeModel, load_instance: LoadInstance) -> None:
    booster = xgboost_model("multi:softprob", classes=3, rounds=700)  # 2100 trees
    config = config_text("xgboost_ubj", output_dims=(3,), is_classifier="true", predict_proba="true")
    instance = load_instance(make_model("big", booster, "xgboost_ubj", config))
    assert isinstance(instance.forest, XGBoostForest) and instance.forest.small is None
    expected = softmax(booster.inplace_predict(X[:1], predict_type="margin"))
    np.testing.assert_allclose(predict(instance, X[:1]), expected, **TOL)


def test_lightgbm_regressor_and_binary(make_model: MakeModel, load_instance: LoadInstance) -> None:
    regressor = lightgbm_model("regression")
    model = make_model("reg", regressor, "lightgbm", config_text("lightgbm", is_classifier="false"))
    np.testing.assert_allclose(predict(load_instance(model), X), regressor.predict(X), rtol=1e-5, atol=1e-5)
    binary = lightgbm_model("binary")
    config = config_text("lightgbm", output_dims=(2,), is_classifier="true", predict_proba="true")
    p = binary.predict(X)
    answer = predict(load_instance(make_model("bin", binary, "lightgbm", config)), X)
    np.testing.assert_allclose(answer, np.stack([1 - p, p], axis=1), rtol=1e-5, atol=1e-6)


def test_lightgbm_multiclass(make_model: MakeModel, load_instance: LoadInstance) -> None:
    booster = lightgbm_model("multiclass", classes=3)
    config = config_text("lightgbm", output_dims=(3,), is_classifier="true", predict_proba="true")
    answer = predict(load_instance(make_model("multi", booster, "lightgbm", config)), X)
    np.testing.assert_allclose(answer, booster.predict(X), rtol=1e-5, atol=1e-6)


def test_lightgbm_ova_predict_proba_is_a_softmax_as_in_fil(
    make_model: MakeModel, load_instance: LoadInstance
) -> None:
    booster = lightgbm_model("multiclassova", classes=3)
    config = config_text("lightgbm", output_dims=(3,), is_classifier="true", predict_proba="true")
    answer = predict(load_instance(make_model("ova", booster, "lightgbm", config)), X)
    np.testing.assert_allclose(answer, softmax(booster.predict(X, raw_score=True)), rtol=1e-5, atol=1e-6)
    # Without predict_proba: the class with the highest (sigmoid) score.
    classes = predict(
        load_instance(
            make_model("ova_cls", booster, "lightgbm", config_text("lightgbm", is_classifier="true"))
        ),
        X,
    )
    np.testing.assert_array_equal(classes, booster.predict(X).argmax(axis=1))
    # Served as a regressor: LightGBM's own per-class scores.
    regressor = config_text("lightgbm", output_dims=(3,), is_classifier="false")
    scores = predict(load_instance(make_model("ova_reg", booster, "lightgbm", regressor)), X)
    np.testing.assert_allclose(scores, booster.predict(X), rtol=1e-5, atol=1e-6)


def test_treelite_checkpoints(make_model: MakeModel, load_instance: LoadInstance, tmp_path: object) -> None:
    booster = xgboost_model("multi:softprob", classes=3)
    config = config_text("treelite_checkpoint", output_dims=(3,), is_classifier="true", predict_proba="true")
    answer = predict(load_instance(make_model("tl", booster, "treelite_checkpoint", config)), X)
    np.testing.assert_allclose(answer, booster.inplace_predict(X), **TOL)
    binary = lightgbm_model("binary")
    config = config_text("treelite_checkpoint", is_classifier="true")
    answer = predict(load_instance(make_model("tl_lgb", binary, "treelite_checkpoint", config)), X)
    np.testing.assert_array_equal(answer, (binary.predict(X) > 0.5).astype(np.float32))


def test_legacy_binary_matches_treelite_reading_it(
    make_model: MakeModel, load_instance: LoadInstance
) -> None:
    booster = xgboost_model("binary:logistic")
    model = make_model(
        "legacy", booster, "xgboost", config_text(None, is_classifier="false")
    )  # the default type
    expected = treelite.gtil.predict(
        treelite.frontend.load_xgboost_model_legacy_binary(model / "1" / "xgboost.model"), X
    )
    np.testing.assert_allclose(predict(load_instance(model), X), expected.ravel(), **TOL)


def test_shap_values_from_xgboost(make_model: MakeModel, load_instance: LoadInstance) -> None:
    binary = xgboost_model("binary:logistic")
    config = config_text("xgboost_json", shap_dims=(FEATURES + 1,), is_classifier="true")
    shap = predict(load_instance(make_model("bin", binary, "xgboost_json", config)), X, "treeshap_output")
    assert shap.shape == (64, FEATURES + 1)
    np.testing.assert_allclose(shap, binary.predict(xgb.DMatrix(X), pred_contribs=True), rtol=1e-5, atol=1e-5)
    multi = xgboost_model("multi:softprob", classes=3)
    config = config_text("xgboost_json", shap_dims=(3, FEATURES + 1), is_classifier="true")
    shap = predict(load_instance(make_model("multi", multi, "xgboost_json", config)), X, "treeshap_output")
    assert shap.shape == (64, 3, FEATURES + 1)
    np.testing.assert_allclose(shap, multi.predict(xgb.DMatrix(X), pred_contribs=True), rtol=1e-5, atol=1e-5)


def test_shap_values_from_lightgbm(make_model: MakeModel, load_instance: LoadInstance) -> None:
    booster = lightgbm_model("multiclass", classes=3)
    config = config_text("lightgbm", shap_dims=(3 * (FEATURES + 1),), is_classifier="true")
    instance = load_instance(make_model("multi", booster, "lightgbm", config))
    both = instance.execute({"input__0": X}, ["output__0", "treeshap_output"])
    np.testing.assert_allclose(
        both["treeshap_output"], booster.predict(X, pred_contrib=True), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_array_equal(both["output__0"], booster.predict(X).argmax(axis=1))


def test_only_requested_outputs_are_computed(make_model: MakeModel, load_instance: LoadInstance) -> None:
    booster = xgboost_model("reg:squarederror")
    config = config_text("xgboost_json", shap_dims=(FEATURES + 1,), is_classifier="false")
    instance = load_instance(make_model("reg", booster, "xgboost_json", config))
    assert list(instance.execute({"input__0": X}, ["treeshap_output"])) == ["treeshap_output"]


def test_no_rows_no_answers(make_model: MakeModel, load_instance: LoadInstance) -> None:
    booster = xgboost_model("multi:softprob", classes=3)
    config = config_text("xgboost_json", output_dims=(3,), is_classifier="true", predict_proba="true")
    answer = predict(load_instance(make_model("m", booster, "xgboost_json", config)), X[:0])
    assert answer.shape == (0, 3)


def test_unbatched_models_take_rows_of_features(make_model: MakeModel, load_instance: LoadInstance) -> None:
    booster = xgboost_model("reg:squarederror")
    config = config_text(
        "xgboost_json", features=None, output_dims=(-1, 1), max_batch_size=0, is_classifier="false"
    )
    config += f'input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ -1, {FEATURES} ] }} ]\n'
    answer = predict(load_instance(make_model("nobatch", booster, "xgboost_json", config)), X[:5])
    np.testing.assert_allclose(answer, booster.inplace_predict(X[:5]), **TOL)


def test_a_wrong_feature_count_behind_variable_dims_is_refused(
    make_model: MakeModel, load_instance: LoadInstance
) -> None:
    booster = xgboost_model("reg:squarederror")
    config = config_text("xgboost_json", features=-1, is_classifier="false")
    instance = load_instance(make_model("any", booster, "xgboost_json", config))
    with pytest.raises(
        BackendInvalidArgument,
        match=f"input 'input__0' has shape \\[2, 4\\], but the model takes rows of {FEATURES} features",
    ):
        instance.execute({"input__0": X[:2, :4]}, ["output__0"])
    assert predict(instance, X[:2]).shape == (2,)


def test_scikit_learn_forests_as_treelite_checkpoints(repo: Path, load_instance: LoadInstance) -> None:
    """scikit-learn forests reach FIL as Treelite checkpoints; a binary one is a 2-class model there."""
    ensemble = pytest.importorskip("sklearn.ensemble")
    import treelite.sklearn

    data = np.nan_to_num(rows(300, seed=3))
    labels = (data[:, 0] + data[:, 1] > 0).astype(int) + (data[:, 2] > 1).astype(int)
    for name, classes in (("rf_binary", 2), ("rf_multi", 3)):
        forest = ensemble.RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0)
        forest.fit(data, np.minimum(labels, classes - 1))
        (repo / name / "1").mkdir(parents=True)
        treelite.sklearn.import_model(forest).serialize(repo / name / "1" / "checkpoint.tl")
        config = config_text(
            "treelite_checkpoint", output_dims=(classes,), is_classifier="true", predict_proba="true"
        )
        (repo / name / "config.pbtxt").write_text(config)
        clean = np.nan_to_num(X)
        np.testing.assert_allclose(
            predict(load_instance(repo / name), clean), forest.predict_proba(clean), **TOL
        )
