"""Models under --model-memory-budget, end to end: what each version takes is measured and shown (repository
index, statistics, metrics); a load past the budget unloads idle models least recently used first, never a
pinned or busy one; a load that cannot fit fails with 507 / RESOURCE_EXHAUSTED and disturbs nothing; a load
that runs out of memory (MemoryError, a stub killed by the OOM killer) answers the same; on-demand loading.

The models are python models that hold a known number of MiB from initialize() on, so that what each takes is
far above the noise of the server's own memory.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Iterator

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from e2e.memory_models import write_holder
from e2e.server_process import RunningServer, running_server

MIB = 1 << 20
MODEL_MIB = 160
# Two models of MODEL_MIB and their stub processes fit; a third does not.
BUDGET = 2 * MODEL_MIB * MIB + 150 * MIB


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("memory")
    repo = base / "repo"
    for name in ("big_a", "big_b", "big_c"):
        write_holder(repo, name, MIB=str(MODEL_MIB))
    write_holder(repo, "big_slow", MIB=str(MODEL_MIB), SLEEP_S="3")
    write_holder(repo, "pinned", MIB="1")
    write_holder(repo, "huge", MIB=str(3 * MODEL_MIB))
    write_holder(repo, "memory_error", FAIL="memory_error")
    write_holder(repo, "oom_killed", FAIL="oom_killed")
    write_holder(repo, "on_demand", MIB="1")
    with running_server(
        [repo],
        base / "server.log",
        "--model-control-mode=explicit",
        "--load-model=pinned",
        f"--model-memory-budget={BUDGET}",
        "--model-load-on-demand=true",
    ) as running:
        yield running


def _base(server: RunningServer) -> str:
    return f"http://127.0.0.1:{server.http_port}"


def _load(server: RunningServer, name: str) -> requests.Response:
    return requests.post(f"{_base(server)}/v2/repository/models/{name}/load", timeout=120)


def _unload(server: RunningServer, name: str) -> None:
    answer = requests.post(f"{_base(server)}/v2/repository/models/{name}/unload", timeout=60)
    assert answer.status_code == 200, answer.text


def _infer(server: RunningServer, name: str) -> requests.Response:
    body = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [7]}]}
    return requests.post(f"{_base(server)}/v2/models/{name}/infer", json=body, timeout=60)


def _ready(server: RunningServer) -> set[str]:
    index = requests.post(f"{_base(server)}/v2/repository/index", json={"ready": True}, timeout=10).json()
    return {row["name"] for row in index}


def _settle(server: RunningServer, expected: set[str]) -> None:
    """Unloads finish after their answer; wait for the index to show them."""
    deadline = time.monotonic() + 30
    while _ready(server) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _ready(server) == expected


def _start_clean(server: RunningServer) -> None:
    for name in _ready(server) - {"pinned"}:
        _unload(server, name)
    _settle(server, {"pinned"})


def test_each_version_shows_what_it_takes(server: RunningServer) -> None:
    _start_clean(server)
    assert _load(server, "big_a").status_code == 200
    index = requests.post(f"{_base(server)}/v2/repository/index", json={"ready": True}, timeout=10).json()
    taken = {row["name"]: row["memory_bytes"] for row in index}
    # The weights, and the stub process around them.
    assert MODEL_MIB * MIB <= taken["big_a"] < (MODEL_MIB + 150) * MIB
    assert taken["pinned"] < taken["big_a"]
    stats = requests.get(f"{_base(server)}/v2/models/big_a/stats", timeout=10).json()["model_stats"][0]
    assert stats["memory_usage"] == [{"type": "CPU", "id": 0, "byte_size": taken["big_a"]}]
    metrics = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    assert f'nv_model_memory_bytes{{model="big_a",version="1"}} {taken["big_a"]}' in metrics
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        usage = client.get_inference_statistics("big_a").model_stats[0].memory_usage
        assert [(u.type, u.byte_size) for u in usage] == [("CPU", taken["big_a"])]


def test_a_load_past_the_budget_unloads_the_least_recently_used_idle_model(server: RunningServer) -> None:
    _start_clean(server)
    for name in ("big_a", "big_b"):
        assert _load(server, name).status_code == 200
    assert _infer(server, "big_a").status_code == 200  # big_b is now the least recently used
    answer = _load(server, "big_c")
    assert answer.status_code == 200, answer.text
    _settle(server, {"pinned", "big_a", "big_c"})
    assert "unloading 'big_b'" in server.log()
    assert "least recently used) to make room for 'big_c'" in server.log()
    assert _infer(server, "big_c").status_code == 200
    # The index says which model the server unloaded on its own, when and why; so does the console's page.
    index = requests.post(f"{_base(server)}/v2/repository/index", timeout=10).json()
    evicted = {row["name"]: row.get("evicted", "") for row in index}
    assert evicted["big_b"].endswith("unloaded to make room for 'big_c' under --model-memory-budget")
    assert evicted["big_a"] == evicted["big_c"] == ""
    page = requests.get(f"{_base(server)}/", timeout=10).text
    assert "Evicted lately" in page
    assert "big_b: " in page and "to make room for &#x27;big_c&#x27;" in page
    # Loaded again on request: no longer evicted.
    assert _load(server, "big_b").status_code == 200
    index = requests.post(f"{_base(server)}/v2/repository/index", timeout=10).json()
    assert all("evicted" not in row for row in index if row["name"] == "big_b")


def test_a_model_with_a_request_in_flight_is_not_unloaded(server: RunningServer) -> None:
    _start_clean(server)
    for name in ("big_slow", "big_a"):
        assert _load(server, name).status_code == 200
    assert _infer(server, "big_a").status_code == 200  # big_slow is the least recently used, but busy
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        busy = pool.submit(_infer, server, "big_slow")
        time.sleep(0.5)
        assert _load(server, "big_b").status_code == 200
        assert busy.result().status_code == 200
    _settle(server, {"pinned", "big_slow", "big_b"})


def test_a_load_that_cannot_fit_fails_with_507_and_disturbs_nothing(server: RunningServer) -> None:
    _start_clean(server)
    assert _load(server, "big_a").status_code == 200
    answer = _load(server, "huge")
    assert answer.status_code == 507
    message = answer.json()["error"]
    assert "model 'huge' version 1 takes" in message or "model 'huge' version 1 needs at least" in message
    assert f"does not fit in --model-memory-budget={BUDGET}" in message
    # Nothing was unloaded for it: a load that could never fit unloads nothing.
    assert _ready(server) == {"pinned", "big_a"}
    assert _infer(server, "big_a").status_code == 200
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as error:
            client.load_model("huge")
        assert error.value.status() == "StatusCode.RESOURCE_EXHAUSTED"


@pytest.mark.parametrize(
    ("name", "message"),
    [("memory_error", "MemoryError"), ("oom_killed", "most likely by the kernel's OOM killer")],
)
def test_a_load_that_runs_out_of_memory_is_507(server: RunningServer, name: str, message: str) -> None:
    answer = _load(server, name)
    assert answer.status_code == 507
    assert message in answer.json()["error"]
    assert _infer(server, "pinned").status_code == 200


def test_pinned_models_are_never_unloaded(server: RunningServer) -> None:
    _start_clean(server)
    for name in ("big_a", "big_b", "big_c", "big_a"):
        assert _load(server, name).status_code == 200
    assert "pinned" in _ready(server)
    assert "unloading 'pinned'" not in server.log()


def test_on_demand_loading_serves_the_request_and_loads_once(server: RunningServer) -> None:
    _start_clean(server)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: _infer(server, "on_demand"), range(8)))
    assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers]
    assert np.array_equal(answers[0].json()["outputs"][0]["data"], [7])
    assert server.log().count("loading 'on_demand' on demand") == 1
    stats = requests.get(f"{_base(server)}/v2/models/on_demand/stats", timeout=10).json()["model_stats"][0]
    assert 1 <= stats["cold_start"]["count"] <= 8  # those that came while it loaded
    assert stats["cold_start"]["ns"] > 0
    # A model in no repository is still unknown.
    missing = _infer(server, "no_such_model")
    assert missing.status_code == 404
    assert "Request for unknown model: 'no_such_model' is not found" in missing.json()["error"]


def test_on_demand_load_of_a_model_that_fails_answers_its_error(server: RunningServer) -> None:
    answer = _infer(server, "memory_error")
    assert answer.status_code == 507
    assert "MemoryError" in json.dumps(answer.json())
    assert _infer(server, "pinned").status_code == 200
