"""The FIL backend end to end: XGBoost, LightGBM and Treelite models trained at test time, served by one real
server, asked through tritonclient HTTP and gRPC, and answered as the libraries answer in process.

Also: SHAP values, auto-complete, dynamic batching of 1-row requests, bad requests (400), and the models that
must not load (a corrupt file, an unknown model_type, a missing file, a feature-count mismatch, KIND_GPU without
a GPU), which leave the others serving.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import xgboost as xgb

from backends.fil.fil_models import (
    FEATURES,
    MODEL_FILES,
    config_text,
    lightgbm_model,
    rows,
    save,
    xgboost_model,
)
from e2e import server_process
from e2e.clients import Api, failure
from e2e.server_process import LOAD_ALL_EXPLICITLY, RunningServer, running_server

X = rows(24, seed=7)
TOL = {"rtol": 1e-5, "atol": 1e-6}
BATCHING = "dynamic_batching { max_queue_delay_microseconds: 20000 }"
# model -> output -> what the library answers for X.
Expected = dict[str, dict[str, np.ndarray[Any, Any]]]
SERVED = (
    "xgb_regressor",
    "xgb_binary_proba",
    "xgb_legacy_classes",
    "xgb_multiclass",
    "treelite_classes",
    "lgb_multiclass",
    "autofilled",
)


@pytest.fixture(scope="module", autouse=True)
def frontend_processes() -> Iterator[int]:
    """The backend does not depend on the frontend mode: one mode, one server."""
    server_process.frontend_processes = 0
    yield 0


def _softmax(margins: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    exp = np.exp(margins - margins.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)  # type: ignore[no-any-return]


def _add(repo: Path, name: str, booster: Any, model_type: str, config: str) -> None:
    save(booster, repo / name / "1" / MODEL_FILES[model_type], model_type)
    (repo / name / "config.pbtxt").write_text(config)


def _build(repo: Path) -> Expected:
    """The repository's models, and what each should answer for X (from the library, in process)."""
    expected: Expected = {}

    regressor = xgboost_model("reg:squarederror")
    text = config_text("xgboost_json", shap_dims=(FEATURES + 1,), extra=BATCHING, is_classifier="false")
    _add(repo, "xgb_regressor", regressor, "xgboost_json", text)
    expected["xgb_regressor"] = {
        "output__0": regressor.inplace_predict(X),
        "treeshap_output": regressor.predict(xgb.DMatrix(X), pred_contribs=True),
    }

    binary = xgboost_model("binary:logistic")
    p = binary.inplace_predict(X)
    text = config_text("xgboost_ubj", output_dims=(2,), is_classifier="true", predict_proba="true")
    _add(repo, "xgb_binary_proba", binary, "xgboost_ubj", text)
    expected["xgb_binary_proba"] = {"output__0": np.stack([1 - p, p], axis=1)}
    # The default model_type: XGBoost's legacy binary format, read by Treelite.
    _add(
        repo,
        "xgb_legacy_classes",
        binary,
        "xgboost",
        config_text(None, is_classifier="true", threshold="0.4"),
    )
    expected["xgb_legacy_classes"] = {"output__0": (p > 0.4).astype(np.float32)}

    multi = xgboost_model("multi:softprob", classes=3)
    probabilities = _softmax(multi.inplace_predict(X, predict_type="margin"))
    text = config_text(
        "xgboost_json",
        output_dims=(3,),
        shap_dims=(3, FEATURES + 1),
        is_classifier="true",
        predict_proba="true",
    )
    _add(repo, "xgb_multiclass", multi, "xgboost_json", text)
    expected["xgb_multiclass"] = {
        "output__0": probabilities,
        "treeshap_output": multi.predict(xgb.DMatrix(X), pred_contribs=True),
    }
    text = config_text("treelite_checkpoint", is_classifier="true", extra="instance_group [ { count: 2 } ]")
    _add(repo, "treelite_classes", multi, "treelite_checkpoint", text)
    expected["treelite_classes"] = {"output__0": probabilities.argmax(axis=1).astype(np.float32)}

    gbm = lightgbm_model("multiclass", classes=3)
    text = config_text(
        "lightgbm", output_dims=(3,), is_classifier="true", predict_proba="true", cpu_nthread="1"
    )
    _add(repo, "lgb_multiclass", gbm, "lightgbm", text)
    expected["lgb_multiclass"] = {"output__0": gbm.predict(X)}

    gbm_regressor = lightgbm_model("regression")
    text = config_text("lightgbm", features=None, output_dims=None, max_batch_size=None)
    _add(repo, "autofilled", gbm_regressor, "lightgbm", text)
    expected["autofilled"] = {"output__0": gbm_regressor.predict(X)}

    # Models that must not load.
    _add(repo, "corrupt", regressor, "xgboost_json", config_text("xgboost_json", is_classifier="false"))
    (repo / "corrupt" / "1" / "xgboost.json").write_text('{"learner": truncated')
    _add(repo, "unknown_type", regressor, "xgboost_json", config_text("pickle", is_classifier="false"))
    _add(repo, "missing_file", regressor, "xgboost_json", config_text("lightgbm", is_classifier="false"))
    _add(
        repo,
        "wrong_features",
        regressor,
        "xgboost_json",
        config_text("xgboost_json", features=5, is_classifier="false"),
    )
    gpu = config_text("xgboost_json", is_classifier="false", extra="instance_group [ { kind: KIND_GPU } ]")
    _add(repo, "gpu_kind", regressor, "xgboost_json", gpu)
    return expected


@pytest.fixture(scope="module")
def built(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, dict[str, np.ndarray[Any, Any]]]]:
    repo = tmp_path_factory.mktemp("fil_repo")
    return repo, _build(repo)


@pytest.fixture(scope="module")
def server(
    built: tuple[Path, Any], tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("fil_log") / "server.log"
    with running_server([built[0]], log, *LOAD_ALL_EXPLICITLY) as running:
        yield running


@pytest.fixture(scope="module")
def expected(
    built: tuple[Path, dict[str, dict[str, np.ndarray[Any, Any]]]],
) -> dict[str, dict[str, np.ndarray[Any, Any]]]:
    return built[1]


def _infer(
    api: Api, model: str, data: np.ndarray[Any, Any], outputs: tuple[str, ...] = ("output__0",)
) -> Any:
    requested = [api.module.InferRequestedOutput(name) for name in outputs]
    return api.client.infer(model, api.inputs(input__0=data), outputs=requested)


@pytest.mark.parametrize(
    "model",
    [
        "xgb_regressor",
        "xgb_binary_proba",
        "xgb_legacy_classes",
        "xgb_multiclass",
        "treelite_classes",
        "lgb_multiclass",
        "autofilled",
    ],
)
def test_answers_match_the_library(model: str, api: Api, expected: dict[str, Any]) -> None:
    count = 4 if model == "autofilled" else len(X)  # auto-complete gave it max_batch_size 4
    answer = _infer(api, model, X[:count]).as_numpy("output__0")
    want = expected[model]["output__0"][:count]
    assert answer.dtype == np.float32
    # FIL answers with the config's dims minus their 1s: dims [ 1 ] give [batch], [ 3 ] give [batch, 3].
    assert answer.shape == want.shape
    np.testing.assert_allclose(answer, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model", ["xgb_regressor", "xgb_multiclass"])
def test_shap_values_match_xgboost(model: str, api: Api, expected: dict[str, Any]) -> None:
    result = _infer(api, model, X, ("output__0", "treeshap_output"))
    shap = result.as_numpy("treeshap_output")
    want = expected[model]["treeshap_output"]
    assert shap.shape == want.shape  # [batch, features + 1], or [batch, classes, features + 1]
    np.testing.assert_allclose(shap, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        result.as_numpy("output__0"), expected[model]["output__0"], rtol=1e-5, atol=1e-5
    )


def test_one_row_requests_batched_together(server: RunningServer, expected: dict[str, Any]) -> None:
    client = httpclient.InferenceServerClient(server.http_url, concurrency=8)
    try:
        api = Api("http", httpclient, client)
        output = [httpclient.InferRequestedOutput("output__0")]
        pending = [
            client.async_infer("xgb_regressor", api.inputs(input__0=X[i : i + 1]), outputs=output)
            for i in range(len(X))
        ]
        answers = [p.get_result().as_numpy("output__0") for p in pending]
        assert all(a.shape == (1,) for a in answers)
        np.testing.assert_allclose(np.concatenate(answers), expected["xgb_regressor"]["output__0"], **TOL)
        stats = client.get_inference_statistics("xgb_regressor")["model_stats"][0]
        assert int(stats["execution_count"]) < int(stats["inference_count"])  # some requests ran together
    finally:
        client.close()


def test_metadata_and_autofilled_config(api: Api) -> None:
    metadata = api.client.get_model_metadata("xgb_multiclass")
    config = api.client.get_model_config("autofilled")
    if api.name == "grpc":
        metadata = {"inputs": [{"shape": list(t.shape)} for t in metadata.inputs]}
        config = {
            "input": [{"dims": [str(d) for d in t.dims]} for t in config.config.input],
            "output": [{"dims": [str(d) for d in t.dims]} for t in config.config.output],
            "parameters": {k: {"string_value": v.string_value} for k, v in config.config.parameters.items()},
            "max_batch_size": config.config.max_batch_size,
        }
    assert [int(d) for d in metadata["inputs"][0]["shape"]] == [-1, FEATURES]
    assert [int(d) for d in config["input"][0]["dims"]] == [FEATURES]
    assert [int(d) for d in config["output"][0]["dims"]] == [1]
    assert config["parameters"]["is_classifier"]["string_value"] == "false"
    assert int(config["max_batch_size"]) == 4


def test_a_wrong_feature_count_is_400(api: Api) -> None:
    error = failure(lambda: _infer(api, "xgb_regressor", X[:2, :5]))
    assert error.status() == api.status(400, grpc.StatusCode.INVALID_ARGUMENT)
    assert (
        f"unexpected shape for input 'input__0' for model 'xgb_regressor'. Expected [-1,{FEATURES}], got [2,5]"
        in str(error)
    )


def test_a_wrong_datatype_is_400(api: Api) -> None:
    error = failure(lambda: _infer(api, "xgb_regressor", X[:2].astype(np.float64)))
    assert error.status() == api.status(400, grpc.StatusCode.INVALID_ARGUMENT)
    assert "FP32" in str(error) and "FP64" in str(error)


def _index(server: RunningServer) -> dict[str, dict[str, str]]:
    rows_ = requests.post(f"http://{server.http_url}/v2/repository/index", timeout=5).json()
    return {row["name"]: row for row in rows_}


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        ("corrupt", "failed to read xgboost_json model file"),
        (
            "unknown_type",
            "parameter 'model_type' must be one of xgboost, xgboost_json, xgboost_ubj, lightgbm, "
            "treelite_checkpoint, got 'pickle'",
        ),
        ("missing_file", "model.txt' not found (model_type 'lightgbm')"),
        (
            "wrong_features",
            f"input 'input__0' has dims [ 5 ] in the configuration, but the model takes {FEATURES} features",
        ),
        ("gpu_kind", "KIND_GPU"),
    ],
)
def test_broken_models_are_unavailable_with_their_reason(
    server: RunningServer, model: str, reason: str
) -> None:
    row = _index(server)[model]
    assert row["state"] == "UNAVAILABLE"
    assert reason in row["reason"]


def test_load_errors_through_tritonclient_and_the_others_still_serve(
    server: RunningServer, expected: dict[str, Any]
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        error = failure(lambda: client.load_model("corrupt"))
        assert "failed to read xgboost_json model file" in str(error)
        assert not client.is_model_ready("corrupt")
        assert all(_index(server)[name]["state"] == "READY" for name in expected)
        answer = _infer(Api("grpc", grpcclient, client), "lgb_multiclass", X).as_numpy("output__0")
        np.testing.assert_allclose(answer, expected["lgb_multiclass"]["output__0"], rtol=1e-5, atol=1e-5)
    finally:
        client.close()
