"""Ensembles end to end through tritonclient: answers, concurrency, decoupled steps, failures, statistics, and
load/unload of ensembles with their composing models (tests/e2e/ensemble_models.py builds the repository)."""

from __future__ import annotations

import queue
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from e2e import ensemble_models
from e2e.clients import Api, failure, poll
from e2e.server_process import LOAD_ALL_EXPLICITLY, RunningServer, running_server


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Path:
    root = tmp_path_factory.mktemp("ensembles") / "models"
    root.mkdir()
    ensemble_models.build(root)
    return root


@pytest.fixture(scope="module")
def server(
    repo: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    # The broken ensembles fail to load on purpose.
    log = tmp_path_factory.mktemp("logs") / "ensembles.log"
    with running_server([repo], log, *LOAD_ALL_EXPLICITLY) as running:
        yield running


def batch(*rows: list[float]) -> np.ndarray:
    return np.array(rows, dtype=np.float32)


A = batch([1, 2, 3, 4], [5, 6, 7, 8])
B = batch([1, 1, 1, 1], [2, 2, 2, 2])


def stats(http: httpclient.InferenceServerClient, model: str) -> dict[str, Any]:
    result: dict[str, Any] = http.get_inference_statistics(model)["model_stats"][0]
    return result


def successes(http: httpclient.InferenceServerClient, *models: str) -> list[int]:
    return [stats(http, m)["inference_stats"]["success"]["count"] for m in models]


# --- answers


def test_chain_of_two_onnx_steps(api: Api) -> None:
    result = api.infer("ens_chain", A=A, B=B)
    np.testing.assert_array_equal(result.as_numpy("SUM2"), 2 * (A + B))
    np.testing.assert_array_equal(result.as_numpy("DIFF"), A - B)


def test_each_request_counts_on_the_ensemble_and_every_step(http: httpclient.InferenceServerClient) -> None:
    models = ("ens_chain", "add_sub_onnx", "scale2")
    before = [stats(http, m) for m in models]
    http.infer("ens_chain", Api("http", httpclient, http).inputs(A=A, B=B))
    after = [stats(http, m) for m in models]
    # As in Triton: one success, one execution of batch 2, on the ensemble and on each step.
    for old, new in zip(before, after, strict=True):
        assert new["inference_stats"]["success"]["count"] - old["inference_stats"]["success"]["count"] == 1
        assert new["execution_count"] - old["execution_count"] == 1
        assert new["inference_count"] - old["inference_count"] == 2
        assert 2 in [b["batch_size"] for b in new["batch_stats"]]


def test_only_the_steps_of_the_requested_outputs_run(http: httpclient.InferenceServerClient) -> None:
    before = successes(http, "add_sub_onnx", "scale2")
    outputs = [httpclient.InferRequestedOutput("DIFF")]
    result = http.infer("ens_chain", Api("http", httpclient, http).inputs(A=A, B=B), outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("DIFF"), A - B)
    assert result.as_numpy("SUM2") is None
    after = successes(http, "add_sub_onnx", "scale2")
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 0]


def test_python_and_onnx_steps_side_by_side(api: Api) -> None:
    result = api.infer("ens_parallel", A=A, B=B)
    np.testing.assert_array_equal(result.as_numpy("PY_SUM"), A + B)
    np.testing.assert_array_equal(result.as_numpy("ONNX_DIFF"), A - B)


def test_an_output_classifies_with_the_labels_of_the_step_that_produces_it(api: Api) -> None:
    # ONNX_DIFF is add_sub_onnx's OUTPUT1, which has a label file; the ensemble has none of its own (Triton's
    # L0_infer classifies its ensembles so).
    a, b = batch([1, 9, 3, 4]), batch([1, 1, 1, 1])
    outputs = [api.module.InferRequestedOutput("ONNX_DIFF", class_count=2)]
    result = api.client.infer("ens_parallel", api.inputs(A=a, B=b), outputs=outputs)
    assert result.as_numpy("ONNX_DIFF").tolist() == [[b"8.000000:1:second", b"3.000000:3:fourth"]]


def test_an_ensemble_of_an_ensemble(api: Api) -> None:
    np.testing.assert_array_equal(api.infer("ens_nested", A=A, B=B).as_numpy("SUM4"), 4 * (A + B))


def test_optional_inputs_left_out_and_outputs_not_produced(api: Api) -> None:
    """Triton's L0_optional_input test_ensemble_optional_connecting_tensor, and more: an optional input the
    request leaves out and an output a python step leaves out are not waited for; the steps run without them,
    and the response holds the outputs that exist."""
    one, two = np.ones((1, 1), np.float32), np.full((1, 1), 2, np.float32)
    m = api.module
    only_output0 = [m.InferRequestedOutput("OUTPUT0")]
    result = api.client.infer("ens_optional_connecting", api.inputs(INPUT0=one), outputs=only_output0)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), one)
    result = api.infer("ens_optional_connecting", INPUT1=two)  # all outputs asked: OUTPUT0 never comes
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), two)
    assert result.as_numpy("OUTPUT0") is None
    result = api.infer("ens_optional_connecting", INPUT0=one, INPUT1=two)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), one)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), two)
    # test_ensemble_optional_pipeline: the second step's INPUT1 is the first step's OUTPUT0 = INPUT0; its INPUT0
    # is connected to nothing (Triton's identity backend answers zeros for it, a python model nothing).
    result = api.infer("ens_optional_pipeline", INPUT0=one, INPUT1=two)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), one)
    assert result.as_numpy("OUTPUT0") is None


def test_a_non_batching_ensemble_over_a_batching_model(api: Api) -> None:
    a, b = A[:1], B[:1]
    np.testing.assert_array_equal(api.infer("ens_nobatch", A=a, B=b).as_numpy("DIFF"), a - b)


def test_many_clients_each_get_their_own_answer_through_max_inflight_1(server: RunningServer) -> None:
    def one(i: int) -> bool:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            api = Api("http", httpclient, client)
            a = np.full((1, 4), i, dtype=np.float32)
            b = np.arange(4, dtype=np.float32).reshape(1, 4)
            for _ in range(5):
                result = api.infer("ens_inflight", A=a, B=b)
                if not (
                    np.array_equal(result.as_numpy("SUM2"), 2 * (a + b))
                    and np.array_equal(result.as_numpy("DIFF"), a - b)
                ):
                    return False
            return True
        finally:
            client.close()

    with ThreadPoolExecutor(12) as pool:
        assert all(pool.map(one, range(12)))


def test_metadata_and_config(http: httpclient.InferenceServerClient) -> None:
    metadata = http.get_model_metadata("ens_chain")
    assert metadata["platform"] == "ensemble"
    assert [i["name"] for i in metadata["inputs"]] == ["A", "B"]
    assert metadata["inputs"][0]["shape"] == [-1, 4]
    config = http.get_model_config("ens_chain")
    assert config["platform"] == "ensemble"
    assert [s["model_name"] for s in config["ensemble_scheduling"]["step"]] == ["scale2", "add_sub_onnx"]
    assert not config.get("model_transaction_policy", {}).get("decoupled", False)


def test_the_config_has_the_transaction_policy_triton_sets(
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    # Triton sets `decoupled` on every ensemble (false included): the message is present in the protobuf
    # config, which its L0_model_config compares as text.
    config = grpc_client.get_model_config("ens_chain").config
    assert config.HasField("model_transaction_policy") and not config.model_transaction_policy.decoupled


# --- decoupled steps


def test_a_decoupled_step_makes_the_ensemble_stream(grpc_client: grpcclient.InferenceServerClient) -> None:
    assert grpc_client.get_model_config("ens_decoupled").config.model_transaction_policy.decoupled
    responses: queue.Queue[Any] = queue.Queue()
    grpc_client.start_stream(callback=lambda result, error: responses.put((result, error)))
    try:
        values = np.array([4, 5, 6], dtype=np.int32)
        inputs = Api("grpc", grpcclient, grpc_client).inputs(IN=values, DELAY=np.zeros(3, dtype=np.uint32))
        grpc_client.async_stream_infer("ens_decoupled", inputs, enable_empty_final_response=True)
        got: list[tuple[int, int]] = []
        while True:
            result, error = responses.get(timeout=30)
            assert error is None, error
            response = result.get_response()
            if response.outputs:
                got.append((int(result.as_numpy("IDX")[0]), int(result.as_numpy("OUT")[0])))
            if response.parameters["triton_final_response"].bool_param:
                break
    finally:
        grpc_client.stop_stream()
    assert sorted(got) == [(0, 4), (1, 5), (2, 6)]


def test_a_decoupled_ensemble_is_refused_by_plain_infer(api: Api) -> None:
    error = failure(
        lambda: api.infer("ens_decoupled", IN=np.array([1], np.int32), DELAY=np.array([0], np.uint32))
    )
    assert error.status() == api.status(501, grpc.StatusCode.UNIMPLEMENTED)
    assert "doesn't support models with decoupled transaction policy" in error.message()


# --- failures


def test_a_failing_step_fails_the_request_with_the_ensembles_name(
    api: Api, http: httpclient.InferenceServerClient
) -> None:
    before = stats(http, "ens_fail")["inference_stats"]["fail"]["count"]
    error = failure(lambda: api.infer("ens_fail", A=-A, B=B))
    assert error.message().startswith("in ensemble 'ens_fail', ")
    assert "negative input" in error.message()
    assert stats(http, "ens_fail")["inference_stats"]["fail"]["count"] == before + 1
    # The same ensemble, and every other, still answers.
    np.testing.assert_array_equal(api.infer("ens_fail", A=A, B=B).as_numpy("OUT"), A - B)
    np.testing.assert_array_equal(api.infer("ens_chain", A=A, B=B).as_numpy("DIFF"), A - B)


def test_a_bad_request_is_refused_in_the_ensembles_words(api: Api) -> None:
    error = failure(
        lambda: api.infer("ens_chain", A=np.zeros((1, 3), np.float32), B=np.zeros((1, 3), np.float32))
    )
    assert error.status() == api.status(400, grpc.StatusCode.INVALID_ARGUMENT)
    assert "unexpected shape for input 'A' for model 'ens_chain'" in error.message()


def test_broken_ensembles_fail_to_load_with_their_reason(http: httpclient.InferenceServerClient) -> None:
    index = {row["name"]: row for row in http.get_model_repository_index()}
    for name, reason in ensemble_models.BROKEN.items():
        assert index[name]["state"] == "UNAVAILABLE", name
        assert reason in index[name]["reason"], (name, index[name]["reason"])
        assert not http.is_model_ready(name)
    assert http.is_model_ready("ens_chain")


def test_failures_are_counted_for_the_metrics(server: RunningServer) -> None:
    text = requests.get(f"http://localhost:{server.metrics_port}/metrics", timeout=10).text
    assert 'nv_inference_request_failure{model="ens_fail",reason="OTHER",version="1"} 2' in text


# --- loading and unloading (last: they change what is loaded)


def test_unloading_a_composing_model_unloads_the_ensemble_until_it_is_back(
    http: httpclient.InferenceServerClient,
) -> None:
    http.unload_model("scale2")
    poll(lambda: not http.is_model_ready("scale2"), 30, "scale2 unloaded")

    def unloaded(name: str) -> bool:
        row = {r["name"]: r for r in http.get_model_repository_index()}[name]
        return (row["state"], row.get("reason")) == ("UNAVAILABLE", "unloaded")

    for name in ("ens_chain", "ens_nested", "ens_inflight"):  # ens_nested through ens_chain
        poll(lambda: unloaded(name), 30, f"{name} unloaded")  # noqa: B023 (called at once)
    assert http.is_model_ready("ens_parallel")
    error = failure(lambda: Api("http", httpclient, http).infer("ens_chain", A=A, B=B))
    assert error.status() == "404"
    assert error.message() == "Request for unknown model: 'ens_chain' has no available versions"
    http.load_model("scale2")
    for name in ("ens_chain", "ens_nested", "ens_inflight"):
        assert http.is_model_ready(name), name
    np.testing.assert_array_equal(
        Api("http", httpclient, http).infer("ens_chain", A=A, B=B).as_numpy("DIFF"), A - B
    )


def test_loading_an_ensemble_loads_its_composing_models(http: httpclient.InferenceServerClient) -> None:
    for name in ("ens_nested", "ens_chain", "scale2", "add_sub_onnx"):
        http.unload_model(name)
    poll(lambda: not http.is_model_ready("add_sub_onnx"), 30, "composing models unloaded")
    http.load_model("ens_nested")
    for name in ("ens_nested", "ens_chain", "scale2", "add_sub_onnx"):
        assert http.is_model_ready(name), name
    np.testing.assert_array_equal(
        Api("http", httpclient, http).infer("ens_nested", A=A, B=B).as_numpy("SUM4"), 4 * (A + B)
    )


def test_unload_dependents_is_accepted_and_checked(
    http: httpclient.InferenceServerClient, server: RunningServer
) -> None:
    http.unload_model("scale2", unload_dependents=True)
    poll(lambda: not http.is_model_ready("scale2"), 30, "scale2 unloaded")

    def states() -> list[str]:
        index = {row["name"]: row.get("state") for row in http.get_model_repository_index()}
        return [index[n] for n in ("ens_chain", "ens_nested", "add_sub_onnx")]

    poll(lambda: states() == ["UNAVAILABLE", "UNAVAILABLE", "READY"], 30, "the ensembles unloaded")
    response = requests.post(
        f"http://{server.http_url}/v2/repository/models/scale2/unload",
        json={"parameters": {"unload_dependents": "yes"}},
        timeout=10,
    )
    assert response.status_code == 400
    assert "unload_dependents" in response.json()["error"]
    http.load_model("scale2")
    assert http.is_model_ready("ens_nested")


def test_unload_dependents_on_an_ensemble_unloads_what_was_loaded_for_it_only(
    http: httpclient.InferenceServerClient,
) -> None:
    # ens_chain was loaded for ens_nested (test_loading_an_ensemble_loads_its_composing_models); scale2 and
    # add_sub_onnx serve other ensembles too, and stay.
    http.unload_model("ens_nested", unload_dependents=True)

    def state(name: str) -> str:
        return str({r["name"]: r for r in http.get_model_repository_index()}[name].get("state"))

    poll(lambda: state("ens_chain") == "UNAVAILABLE", 30, "ens_chain unloaded with ens_nested")
    assert state("ens_nested") == "UNAVAILABLE"
    assert http.is_model_ready("scale2") and http.is_model_ready("add_sub_onnx")
    assert http.is_model_ready("ens_inflight")


def test_an_ensemble_that_failed_for_a_missing_model_loads_once_the_model_does(
    http: httpclient.InferenceServerClient, repo: Path
) -> None:
    assert not http.is_model_ready("ens_missing")
    shutil.copytree(repo / "scale2", repo / "no_such_model")  # the model it names appears in the repository
    http.load_model("no_such_model")
    poll(lambda: http.is_model_ready("ens_missing"), 30, "ens_missing loaded")
    x = np.ones((1, 4), np.float32)
    np.testing.assert_array_equal(
        Api("http", httpclient, http).infer("ens_missing", X=x).as_numpy("Y"), 2 * x
    )
