"""The tensorflow backend end to end: SavedModels and a GraphDef built at test time, served by one real server,
reached only through tritonclient over HTTP and gRPC, answers compared with TensorFlow's own; models whose
config or files are wrong are UNAVAILABLE with the reason while the others serve."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from e2e import server_process
from e2e.clients import Api, failure
from e2e.server_process import RunningServer, running_server

pytest.importorskip("tensorflow")

# After the skip: these import TensorFlow.
from backends.tensorflow import models
from backends.tensorflow.models import parameters, tf, write_model

X = np.arange(6, dtype=np.float32).reshape(2, 3)
S = np.array([[b"ab"], [b"\x00\xfe"]], dtype=object)  # BYTES [2, 1]: one element per batch item

BATCHED = f"""
max_batch_size: 8
dynamic_batching {{ max_queue_delay_microseconds: 100000 }}
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 3 ] }},
        {{ name: "s" data_type: TYPE_STRING dims: [ 1 ] reshape {{ shape: [] }} }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 1 ] }},
         {{ name: "t" data_type: TYPE_STRING dims: [ 1 ] reshape {{ shape: [] }} }} ]
model_warmup [ {{ name: "zeros" batch_size: 2 inputs [
  {{ key: "x" value: {{ data_type: TYPE_FP32 dims: [ 3 ] zero_data: true }} }},
  {{ key: "s" value: {{ data_type: TYPE_STRING dims: [ 1 ] zero_data: true }} }} ] }} ]
{parameters(TF_NUM_INTRA_THREADS="1", MAX_SESSION_SHARE_COUNT="2")}
"""
GRID = """
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ]
output [ { name: "flat" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape { shape: [ 4 ] } } ]
"""
GRAPH = f"""
platform: "tensorflow_graphdef"
max_batch_size: 4
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ 3 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
{parameters(TF_INIT_OPS_FILE="init_ops.json")}
"""

# Models that must not load, and the reason the repository index gives for each.
REFUSED = {
    "bad_datatype": "configuration expects datatype TYPE_INT32 for input 'x', model provides TYPE_FP32",
    "bad_signature": "the SavedModel has no signature 'nope' (parameter TF_SIGNATURE_DEF); its signatures are",
    "bad_tag": "the SavedModel has no MetaGraph tagged 'gpu' (parameter TF_GRAPH_TAG); its tag sets are ['serve']",
    "corrupt": "unable to load model 'corrupt': failed to read the SavedModel in",
    "gpu_only": "has kind KIND_GPU but no GPUs are available",
    "bad_graph": "configuration expects output 'NOPE' but the graph has no such node",
}


def _build_repository(repo: Path) -> None:
    write_model(repo, "tf_auto", models.matmul)  # no config.pbtxt: auto-complete
    write_model(repo, "tf_batched", models.matmul, BATCHED)
    write_model(repo, "tf_rows", models.fixed_rows)
    write_model(repo, "tf_scale", models.two_signatures, parameters(TF_SIGNATURE_DEF="scale"))
    write_model(repo, "tf_grid", models.grid, GRID)
    write_model(repo, "tf_triples", models.triples)
    write_model(repo, "tf_v1", models.tf1_savedmodel)
    graph_dir = write_model(
        repo, "tf_graph", lambda p: models.graphdef(p, variables=True), GRAPH, filename="model.graphdef"
    )
    (graph_dir / "1" / "init_ops.json").write_text(json.dumps({"init_ops": ["init"]}))

    wrong = 'max_batch_size: 4 input [ { name: "x" data_type: TYPE_INT32 dims: [ 3 ] }, { name: "s" } ]'
    write_model(repo, "bad_datatype", models.matmul, wrong)
    write_model(repo, "bad_signature", models.matmul, parameters(TF_SIGNATURE_DEF="nope"))
    write_model(repo, "bad_tag", models.matmul, parameters(TF_GRAPH_TAG="gpu"))
    corrupt = write_model(repo, "corrupt", models.matmul, 'platform: "tensorflow_savedmodel"')
    (corrupt / "1" / "model.savedmodel" / "saved_model.pb").write_bytes(b"\x0a\xff\xff not a SavedModel")
    write_model(repo, "gpu_only", models.matmul, "instance_group [ { kind: KIND_GPU } ]")
    write_model(
        repo,
        "bad_graph",
        lambda p: models.graphdef(p),
        GRAPH.replace('"OUTPUT"', '"NOPE"').replace(parameters(TF_INIT_OPS_FILE="init_ops.json"), ""),
        filename="model.graphdef",
    )


@pytest.fixture(scope="module", autouse=True)
def frontend_processes() -> Iterator[int]:
    """The backend does not depend on the frontend mode: one mode, one server."""
    server_process.frontend_processes = 0
    yield 0


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("repo")
    _build_repository(repo)
    return repo


@pytest.fixture(scope="module")
def server(
    repository: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("log") / "server.log"
    # TensorFlow's C++ log level is the backend's to set: the server's environment does not carry the test's.
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    with running_server([repository], log, *server_process.LOAD_ALL_EXPLICITLY, env=env) as running:
        yield running


def _tensorflow(model_dir: Path, **inputs: np.ndarray) -> dict[str, np.ndarray]:
    """TensorFlow's own answer: the SavedModel's serving signature called directly."""
    signature = tf.saved_model.load(str(model_dir / "1" / "model.savedmodel")).signatures["serving_default"]
    return {k: v.numpy() for k, v in signature(**{k: tf.constant(v) for k, v in inputs.items()}).items()}


def _index(server: RunningServer) -> dict[str, dict[str, str]]:
    rows = requests.post(f"http://{server.http_url}/v2/repository/index", timeout=10).json()
    return {row["name"]: row for row in rows}


def test_auto_completed_config(http: Any) -> None:
    config = http.get_model_config("tf_auto")
    assert (config["platform"], config["backend"], config["max_batch_size"]) == (
        "tensorflow_savedmodel",
        "tensorflow",
        4,
    )
    assert "dynamic_batching" in config
    assert [(i["name"], i["data_type"], [int(d) for d in i["dims"]]) for i in config["input"]] == [
        ("s", "TYPE_STRING", [1]),
        ("x", "TYPE_FP32", [3]),
    ]
    assert [(g["count"], g["kind"]) for g in config["instance_group"]] == [(2, "KIND_CPU")]


@pytest.mark.parametrize("model", ["tf_auto", "tf_batched"])
def test_answers_match_tensorflow(api: Api, repository: Path, model: str) -> None:
    result = api.infer(model, x=X, s=S)
    direct = _tensorflow(repository / model, x=X, s=S[:, 0])
    np.testing.assert_array_equal(result.as_numpy("y"), direct["y"])
    assert result.as_numpy("y").dtype == np.float32
    assert result.as_numpy("t").reshape(-1).tolist() == direct["t"].tolist() == [b"abab", b"\x00\xfe\x00\xfe"]


def test_variable_dims_without_batching(api: Api, repository: Path) -> None:
    for columns in (1, 5):
        a = np.arange(2 * columns, dtype=np.int32).reshape(2, columns)
        result = api.infer("tf_rows", a=a)
        np.testing.assert_array_equal(
            result.as_numpy("doubled"), _tensorflow(repository / "tf_rows", a=a)["doubled"]
        )


def test_signature_parameter(api: Api) -> None:
    x = np.array([[1.5, -2.0]], dtype=np.float32)
    np.testing.assert_array_equal(api.infer("tf_scale", x=x).as_numpy("scaled"), x * 10.0)


def test_reshape(api: Api) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(api.infer("tf_grid", x=x).as_numpy("flat"), x.reshape(2, 2, 2))


def test_tensorflow_1_savedmodel(api: Api) -> None:
    # Written by TensorFlow 1's builder, with signature keys that are no Python identifiers.
    result = api.client.infer("tf_v1", api.inputs(**{"in": X}))
    np.testing.assert_array_equal(result.as_numpy("out-put"), models.matmul_expected(X))


def test_graphdef_with_init_ops(api: Api) -> None:
    np.testing.assert_array_equal(
        api.infer("tf_graph", INPUT=X).as_numpy("OUTPUT"), models.matmul_expected(X)
    )


def _infer_together(api: Api, server: RunningServer, rows: list[np.ndarray]) -> list[Any]:
    """One request per row, all in flight at once (an HTTP client is not thread-safe: its own async calls)."""
    if api.name == "http":
        client = httpclient.InferenceServerClient(server.http_url, concurrency=len(rows))
        try:
            pending = [client.async_infer("tf_batched", api.inputs(x=x, s=S[:1])) for x in rows]
            return [p.get_result() for p in pending]
        finally:
            client.close()
    with ThreadPoolExecutor(len(rows)) as pool:
        return list(pool.map(lambda x: api.infer("tf_batched", x=x, s=S[:1]), rows))


def test_dynamic_batching_and_warmup(api: Api, server: RunningServer, http: Any) -> None:
    before = http.get_inference_statistics("tf_batched")["model_stats"][0]
    rows = [np.full((1, 3), i, dtype=np.float32) for i in range(8)]
    results = _infer_together(api, server, rows)
    for x, result in zip(rows, results, strict=True):
        np.testing.assert_array_equal(result.as_numpy("y"), models.matmul_expected(x))
    after = http.get_inference_statistics("tf_batched")["model_stats"][0]
    assert int(after["inference_count"]) - int(before["inference_count"]) == 8
    assert int(after["execution_count"]) - int(before["execution_count"]) < 8  # requests ran in batches
    assert "model 'tf_batched': warmup sample 'zeros' ran on 2 instance(s)" in server.log()


def test_bad_input_shape(api: Api) -> None:
    error = failure(lambda: api.infer("tf_auto", x=np.ones((2, 4), np.float32), s=S))
    assert "unexpected shape for input 'x' for model 'tf_auto'" in error.message()
    assert error.status() == api.status(400, grpc.StatusCode.INVALID_ARGUMENT)


def test_runtime_refusal(api: Api) -> None:
    # Auto-completed as batching with dims [1]: each request row is one element of the model's [-1] input.
    three = np.ones((3, 1), np.float32)
    np.testing.assert_array_equal(api.infer("tf_triples", x=three).as_numpy("rows"), np.ones((1, 3)))
    error = failure(lambda: api.infer("tf_triples", x=np.ones((4, 1), np.float32)))
    assert "tensorflow error for model 'tf_triples'" in error.message()
    assert error.status() == api.status(400, grpc.StatusCode.INVALID_ARGUMENT)


@pytest.mark.parametrize("model", sorted(REFUSED))
def test_refused_models_are_unavailable_with_the_reason(server: RunningServer, http: Any, model: str) -> None:
    row = _index(server)[model]
    assert row["state"] == "UNAVAILABLE"
    assert REFUSED[model] in row["reason"]
    assert not http.is_model_ready(model)


def test_server_log(server: RunningServer) -> None:
    log = server.log()
    assert "TensorFlow thread pools: intra-op " in log
    # TensorFlow's C++ runtime stays out of the server log but for its one oneDNN notice, printed at import.
    assert "cpu_feature_guard" not in log
