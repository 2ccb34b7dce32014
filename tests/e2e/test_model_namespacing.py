"""--model-namespacing: two repositories may hold a model of the same name; each is its repository's. An ensemble's
steps are its own repository's models, metrics carry the repository as a `namespace` label, a request naming the
shared name is refused as ambiguous (Triton's words), and a load or unload by that name acts on every repository's
model of it. Without the flag, the shared name fails its load as before."""

from __future__ import annotations

import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from e2e.models import copy_examples, write_config
from e2e.server_process import RunningServer, running_server

ADD_SUB = Path(__file__).parent / "python_models" / "add_sub"
PIPELINE = """
name: "{name}"
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "A" data_type: TYPE_FP32 dims: [ 4 ] }}, {{ name: "B" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "RESULT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
ensemble_scheduling {{ step [ {{ model_name: "add_sub" model_version: -1
  input_map {{ key: "INPUT0" value: "A" }} input_map {{ key: "INPUT1" value: "B" }}
  output_map {{ key: "OUTPUT0" value: "RESULT" }} }} ] }}
"""


def _repositories(root: Path) -> tuple[Path, Path]:
    """Repository `adds` holds add_sub (OUTPUT0 = A + B) and pipeline_adds; `subtracts` an add_sub whose OUTPUT0
    is A - B, and pipeline_subtracts; both ensembles name "add_sub"."""
    adds, subtracts = root / "adds", root / "subtracts"
    for repo, pipeline in ((adds, "pipeline_adds"), (subtracts, "pipeline_subtracts")):
        shutil.copytree(ADD_SUB, repo / "add_sub")
        write_config(repo / pipeline, PIPELINE.format(name=pipeline))
        (repo / pipeline / "1").mkdir()
    model = subtracts / "add_sub" / "1" / "model.py"
    model.write_text(model.read_text().replace("(in_0 + in_1)", "(in_0 - in_1 * 1)"))
    copy_examples(adds, "simple")  # a name only one repository holds
    return adds, subtracts


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Iterator[RunningServer]:
    adds, subtracts = _repositories(tmp_path_factory.mktemp("repos"))
    log = tmp_path_factory.mktemp("logs") / "server.log"
    with running_server([adds, subtracts], log, "--model-namespacing=true", "--model-control-mode=explicit",
                        "--load-model=*") as running:  # fmt: skip
        running.repositories = (adds, subtracts)  # type: ignore[attr-defined]
        yield running


A = np.array([[5, 6, 7, 8]], dtype=np.float32)
B = np.ones((1, 4), dtype=np.float32)


def _infer(module: object, client: object, model: str) -> np.ndarray:
    inputs = []
    for name, value in (
        (("A", A), ("B", B)) if model.startswith("pipeline") else (("INPUT0", A), ("INPUT1", B))
    ):
        tensor = module.InferInput(name, [1, 4], "FP32")  # type: ignore[attr-defined]
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    result = client.infer(model, inputs)  # type: ignore[attr-defined]
    return np.asarray(result.as_numpy("RESULT" if model.startswith("pipeline") else "OUTPUT0"))


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_each_ensemble_uses_its_own_repositorys_model(server: RunningServer, module: object) -> None:
    client = module.InferenceServerClient(server.http_url if module is httpclient else server.grpc_url)  # type: ignore[attr-defined]
    try:
        np.testing.assert_array_equal(_infer(module, client, "pipeline_adds"), A + B)
        np.testing.assert_array_equal(_infer(module, client, "pipeline_subtracts"), A - B)
        with pytest.raises(InferenceServerException) as ambiguous:
            _infer(module, client, "add_sub")
        assert (
            "There are 2 identifiers of model 'add_sub' in global map, model namespace must be provided to "
            "resolve ambiguity." in str(ambiguous.value)
        )
        assert ambiguous.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]  # type: ignore[attr-defined]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), a + a)  # type: ignore[attr-defined]
    finally:
        client.close()  # type: ignore[attr-defined]


def test_the_index_lists_each_repositorys_model_and_metrics_label_it(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        rows = [r for r in client.get_model_repository_index() if r["name"] == "add_sub"]
        assert [r["state"] for r in rows] == ["READY", "READY"]
    finally:
        client.close()
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as answer:
        metrics = answer.read().decode()
    adds, subtracts = server.repositories  # type: ignore[attr-defined]
    for repo in (adds, subtracts):
        assert f'nv_inference_request_success{{model="add_sub",namespace="{repo}",version="1"}}' in metrics
    assert f'model="simple",namespace="{adds}"' in metrics


def test_a_load_or_unload_by_the_shared_name_acts_on_every_repositorys_model(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        client.unload_model("pipeline_adds")
        client.unload_model("pipeline_subtracts")
        client.unload_model("add_sub")
        states = [r.get("state") for r in client.get_model_repository_index() if r["name"] == "add_sub"]
        assert "READY" not in states and len(states) == 2, states
        client.load_model("add_sub")
        states = [r.get("state") for r in client.get_model_repository_index() if r["name"] == "add_sub"]
        assert states == ["READY", "READY"]
        client.load_model("pipeline_subtracts")
        np.testing.assert_array_equal(_infer(httpclient, client, "pipeline_subtracts"), A - B)
    finally:
        client.close()


def test_without_namespacing_the_shared_name_fails_its_load(tmp_path: Path) -> None:
    adds, subtracts = _repositories(tmp_path)
    with running_server([adds, subtracts], tmp_path / "server.log", "--exit-on-error=false",
                        wait_ready=False) as server:  # fmt: skip
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            row = next(r for r in client.get_model_repository_index() if r["name"] == "add_sub")
            assert "appears in multiple model repositories" in row["reason"]
            assert client.is_model_ready("simple")
        finally:
            client.close()
