"""Explicit model control through tritonclient: load, unload, overrides, reloads under traffic, bad requests."""

from __future__ import annotations

import base64
import json
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from e2e.models import add_identity, add_slow, add_versioned_add, copy_examples, slow_inputs, write_config
from e2e.server_process import RunningServer, running_server
from e2e.traffic import Traffic

ADD_CONFIG = """
platform: "onnxruntime_onnx"
max_batch_size: 8
version_policy: {policy}
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] }} ]
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Path:
    root = tmp_path_factory.mktemp("explicit_repo")
    copy_examples(root, "simple", "identity_fp32")
    add_versioned_add(root, "adder", (1, 2), "{ latest { num_versions: 1 } }")
    add_versioned_add(root, "rolling", (1,), "{ latest { num_versions: 1 } }")
    add_identity(root, "broken_later", "FP32")
    add_slow(root)
    write_config(root / "never_valid", 'platform: "onnxruntime_onnx"\nmax_batch_size: -3\n')
    return root


@pytest.fixture(scope="module")
def server(
    repo: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("logs") / "explicit.log"
    with running_server(
        [repo], log, "--model-control-mode=explicit", "--load-model=simple", "--log-verbose=1"
    ) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: RunningServer, frontend_processes: int) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.http_url)


@pytest.fixture(scope="module")
def gclient(server: RunningServer, frontend_processes: int) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(server.grpc_url)


def add_request(client: httpclient.InferenceServerClient, model: str, version: str = "") -> np.ndarray:
    data = np.arange(4, dtype=np.int32).reshape(1, 4)
    inp = httpclient.InferInput("INPUT0", [1, 4], "INT32")
    inp.set_data_from_numpy(data)
    result = client.infer(model, [inp], model_version=version)
    return result.as_numpy("OUTPUT0") - data


def index_of(client: httpclient.InferenceServerClient, name: str) -> list[dict[str, str]]:
    return [row for row in client.get_model_repository_index() if row["name"] == name]


def wait_for_state(
    client: httpclient.InferenceServerClient, name: str, state: str, timeout: float = 10
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = index_of(client, name)
        if rows and all(row.get("state") == state for row in rows):
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} did not reach {state}: {index_of(client, name)}")


def post(server: RunningServer, path: str, body: object | None = None) -> requests.Response:
    return requests.post(f"http://{server.http_url}{path}", json=body, timeout=30)


# --- startup and the index


def test_only_the_named_model_is_loaded_at_startup(client: httpclient.InferenceServerClient) -> None:
    assert client.is_model_ready("simple")
    assert not client.is_model_ready("adder")
    assert client.is_server_ready()  # models never loaded do not count against readiness


def test_index_lists_every_model_of_the_repository(
    client: httpclient.InferenceServerClient, server: RunningServer
) -> None:
    rows = {row["name"]: row for row in client.get_model_repository_index()}
    assert set(rows) >= {"simple", "identity_fp32", "adder", "rolling", "never_valid"}
    assert rows["simple"] == {"name": "simple", "version": "1", "state": "READY"}
    assert rows["identity_fp32"] == {"name": "identity_fp32"}  # never loaded: its name only
    ready = post(server, "/v2/repository/index", {"ready": True}).json()
    assert ready and all(row["state"] == "READY" for row in ready)


def test_server_metadata_lists_the_repository_extension(client: httpclient.InferenceServerClient) -> None:
    extensions = client.get_server_metadata()["extensions"]
    assert "model_repository" in extensions
    assert "model_repository(unload_dependents)" in extensions


# --- load and unload


def test_load_infer_unload_cycle(client: httpclient.InferenceServerClient) -> None:
    client.load_model("adder")
    assert client.is_model_ready("adder")
    assert index_of(client, "adder") == [{"name": "adder", "version": "2", "state": "READY"}]
    assert add_request(client, "adder").tolist() == [[2, 2, 2, 2]]
    client.unload_model("adder")
    wait_for_state(client, "adder", "UNAVAILABLE")
    assert index_of(client, "adder") == [
        {"name": "adder", "version": "2", "state": "UNAVAILABLE", "reason": "unloaded"}
    ]
    assert not client.is_model_ready("adder")
    with pytest.raises(InferenceServerException):
        add_request(client, "adder")
    assert client.is_server_ready()  # an unloaded model does not make the server unready
    client.load_model("adder")  # and it loads again
    assert add_request(client, "adder").tolist() == [[2, 2, 2, 2]]


def test_grpc_load_and_unload(
    client: httpclient.InferenceServerClient, gclient: grpcclient.InferenceServerClient
) -> None:
    gclient.load_model("identity_fp32")
    assert gclient.is_model_ready("identity_fp32")
    gclient.unload_model("identity_fp32", unload_dependents=True)
    wait_for_state(client, "identity_fp32", "UNAVAILABLE")
    assert not gclient.is_model_ready("identity_fp32")


def test_unload_of_a_model_never_loaded_succeeds(client: httpclient.InferenceServerClient) -> None:
    # As Triton: 200 and nothing changes (tritonclient raises on any other status).
    client.unload_model("never_valid")
    client.unload_model("no_such_model")
    assert index_of(client, "never_valid") == [{"name": "never_valid"}]
    assert index_of(client, "no_such_model") == []
    assert client.is_server_ready()


# --- overrides


def test_config_override_replaces_config_pbtxt(
    server: RunningServer, client: httpclient.InferenceServerClient, repo: Path
) -> None:
    override = {
        "platform": "onnxruntime_onnx",
        "max_batch_size": 2,
        "version_policy": {"specific": {"versions": [1]}},
        "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [4]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [4]}],
    }
    client.load_model("adder", config=json.dumps(override))
    assert client.get_model_config("adder")["max_batch_size"] == 2
    assert add_request(client, "adder").tolist() == [[1, 1, 1, 1]]  # version 1, as the override asks
    # Without an override, while the repository is unchanged: the override stays, as in Triton (its
    # L0_lifecycle test_config_override), and nothing is loaded again.
    loads = server.log().count("successfully loaded 'adder'")
    client.load_model("adder")
    assert client.get_model_config("adder")["max_batch_size"] == 2
    assert server.log().count("successfully loaded 'adder'") == loads
    # Once the repository changed: its config.pbtxt again.
    config_file = repo / "adder" / "config.pbtxt"
    config_file.write_text(config_file.read_text() + "\n")
    client.load_model("adder")
    assert client.get_model_config("adder")["max_batch_size"] == 8
    assert add_request(client, "adder").tolist() == [[2, 2, 2, 2]]


def test_file_override_loads_a_model_from_the_request(
    client: httpclient.InferenceServerClient, repo: Path
) -> None:
    model = (repo / "adder" / "1" / "model.onnx").read_bytes()
    config = json.loads(json.dumps({"name": "uploaded", **_add_config_json()}))
    client.load_model("uploaded", config=json.dumps(config), files={"file:7/model.onnx": model})
    assert add_request(client, "uploaded", "7").tolist() == [[1, 1, 1, 1]]
    client.unload_model("uploaded")
    # Not in the repository: once unloaded, it leaves the index.
    deadline = time.monotonic() + 10
    while index_of(client, "uploaded") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert index_of(client, "uploaded") == []


def test_grpc_file_override(
    gclient: grpcclient.InferenceServerClient, client: httpclient.InferenceServerClient, repo: Path
) -> None:
    model = (repo / "adder" / "2" / "model.onnx").read_bytes()
    gclient.load_model(
        "uploaded_grpc", config=json.dumps(_add_config_json()), files={"file:1/model.onnx": model}
    )
    assert add_request(client, "uploaded_grpc").tolist() == [[2, 2, 2, 2]]


def _add_config_json() -> dict[str, object]:
    return {
        "platform": "onnxruntime_onnx",
        "max_batch_size": 8,
        "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [4]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [4]}],
    }


# --- bad load requests: a clear 4xx, nothing else affected


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(
    ("name", "body", "message"),
    [
        ("no_such_model", None, "failed to poll from model repository"),
        ("never_valid", None, "max_batch_size"),
        ("adder", {"parameters": {"config": "{not json"}}, "Invalid config override"),
        ("adder", {"parameters": {"config": '{"max_batch_size": "many"}'}}, "Invalid config override"),
        ("adder", {"parameters": {"config": '{"no_such_field": 1}'}}, "Invalid config override"),
        ("adder", {"parameters": {"config": 7}}, "must be a string"),
        ("adder", {"parameters": {"file:1/model.onnx": _b64(b"x")}}, "requires a 'config'"),
        (
            "adder",
            {"parameters": {"config": "{}", "file:../escape.txt": _b64(b"x")}},
            "within model directory",
        ),
        ("adder", {"parameters": {"config": "{}", "file:/etc/escape": _b64(b"x")}}, "within model directory"),
        ("adder", {"parameters": {"config": "{}", "file:1/a": "***"}}, "not valid base64"),
        ("adder", {"parameters": {"unknown": "x"}}, "Unrecognized load parameter 'unknown'"),
        ("adder", {"parameters": []}, "'parameters' must be a JSON object"),
        ("%2E%2E", None, "invalid model name"),
        ("a%2Fb", None, "invalid model name"),
        ("%20", None, "must not be empty"),
    ],
)
def test_bad_load_requests_answer_400(
    server: RunningServer,
    client: httpclient.InferenceServerClient,
    name: str,
    body: object,
    message: str,
) -> None:
    response = post(server, f"/v2/repository/models/{name}/load", body)
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]
    if body is not None and not message.startswith("'parameters'"):
        assert response.json()["error"].startswith(
            f"failed to load '{name}', failed to poll from model repository: "
        )
    assert client.is_model_ready("simple")


def test_nothing_is_written_outside_the_override_directory(server: RunningServer, tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    body = {"parameters": {"config": json.dumps(_add_config_json()), f"file:../../../..{target}": _b64(b"x")}}
    assert post(server, "/v2/repository/models/sneaky/load", body).status_code == 400
    assert not target.exists()


def test_grpc_bad_load_is_invalid_argument(gclient: grpcclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as info:
        gclient.load_model("no_such_model")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "failed to load 'no_such_model', failed to poll from model repository" in info.value.message()


def test_failed_model_is_in_the_index_with_its_reason(
    server: RunningServer, client: httpclient.InferenceServerClient
) -> None:
    post(server, "/v2/repository/models/never_valid/load")
    [row] = index_of(client, "never_valid")
    assert row["state"] == "UNAVAILABLE"
    assert "max_batch_size" in row["reason"]
    assert not client.is_server_ready()  # strict readiness: a model that failed to load
    client.unload_model("never_valid")
    assert index_of(client, "never_valid") == [{"name": "never_valid"}]
    assert client.is_server_ready()


def test_startup_with_a_missing_model_exits(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="failed to load 'missing'"):
        running_server_exits(
            repo, tmp_path / "missing.log", "--model-control-mode=explicit", "--load-model=missing"
        )


def running_server_exits(repo: Path, log: Path, *args: str) -> None:
    with running_server([repo], log, *args):
        pass


def test_named_repository_is_not_supported(server: RunningServer) -> None:
    response = post(server, "/v2/repository/other/models/simple/load")
    assert response.status_code == 501
    assert response.json()["error"] == "'repository_name' specification is not supported"


# --- reloads


def test_failed_reload_leaves_the_previous_version_serving(
    client: httpclient.InferenceServerClient, repo: Path
) -> None:
    model_dir = repo / "broken_later"
    client.load_model("broken_later")
    good = (model_dir / "config.pbtxt").read_text()
    try:
        (model_dir / "config.pbtxt").write_text(good.replace("max_batch_size: 8", "max_batch_size: -1"))
        with pytest.raises(InferenceServerException, match="max_batch_size"):
            client.load_model("broken_later")
        assert client.is_model_ready("broken_later")
        [row] = index_of(client, "broken_later")
        assert row["state"] == "READY"
        assert row["reason"].startswith("a reload failed: ") and "max_batch_size" in row["reason"]
        data = np.ones((1, 3), np.float32)
        inp = httpclient.InferInput("INPUT0", [1, 3], "FP32")
        inp.set_data_from_numpy(data)
        assert client.infer("broken_later", [inp]).as_numpy("OUTPUT0").tolist() == data.tolist()
    finally:
        (model_dir / "config.pbtxt").write_text(good)
    client.load_model("broken_later")
    assert index_of(client, "broken_later") == [{"name": "broken_later", "version": "1", "state": "READY"}]


def test_new_version_rolls_in_under_traffic_without_failures(
    server: RunningServer, client: httpclient.InferenceServerClient, repo: Path
) -> None:
    client.load_model("rolling")
    send = lambda c: int(add_request(c, "rolling")[0, 0])  # noqa: E731
    with Traffic(server.http_url, send, clients=4) as traffic:
        for version in (2, 3, 4):
            time.sleep(0.2)
            # Odd versions add 1, even ones 2: the answers tell the versions apart.
            shutil.copytree(repo / "adder" / str(2 - version % 2), repo / "rolling" / str(version))
            client.load_model("rolling")
            assert index_of(client, "rolling")[-1] == {
                "name": "rolling",
                "version": str(version),
                "state": "READY",
            }
        time.sleep(0.2)
    assert traffic.failures == []
    assert traffic.answers == {1, 2}
    wait_for_state_of_version(client, "rolling", "3", "UNAVAILABLE")


def wait_for_state_of_version(
    client: httpclient.InferenceServerClient, name: str, version: str, state: str
) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        rows = [r for r in index_of(client, name) if r.get("version") == version]
        if rows and rows[0]["state"] == state:
            return
        time.sleep(0.05)
    raise AssertionError(index_of(client, name))


def test_unchanged_model_is_not_reloaded(
    server: RunningServer, client: httpclient.InferenceServerClient
) -> None:
    before = server.log().count("successfully loaded 'simple'")
    client.load_model("simple")
    assert server.log().count("successfully loaded 'simple'") == before


def test_a_changed_version_policy_loads_only_the_new_versions(
    server: RunningServer, client: httpclient.InferenceServerClient, repo: Path
) -> None:
    # As Triton (its L0_lifecycle test_load_new_model_version): a version whose files did not change stays
    # loaded when only the version policy changed.
    config_file = repo / "adder" / "config.pbtxt"
    original = config_file.read_text()
    assert "latest { num_versions: 1 }" in original
    client.load_model("adder")  # serving version 2 under the repository's policy
    before = server.log().count("loaded 'adder' version 2 (")
    loads = server.log().count("successfully loaded 'adder'")
    try:
        config_file.write_text(original.replace("latest { num_versions: 1 }", "all { }"))
        client.load_model("adder")
        assert client.is_model_ready("adder", "1") and client.is_model_ready("adder", "2")
        assert server.log().count("loaded 'adder' version 2 (") == before  # kept, not loaded again
        assert "all" in client.get_model_config("adder")["version_policy"]
    finally:
        config_file.write_text(original)
        client.load_model("adder")
    assert not client.is_model_ready("adder", "1") and client.is_model_ready("adder", "2")
    assert server.log().count("loaded 'adder' version 2 (") == before
    # Triton's line for each load that changed the model, though the second only retired a version.
    assert server.log().count("successfully loaded 'adder'") == loads + 2


def test_a_load_logs_tritons_line_once_and_each_version_apart(
    server: RunningServer, client: httpclient.InferenceServerClient
) -> None:
    # Triton logs "successfully loaded 'X'" once per load that loads versions (its L0_lifecycle counts them).
    policy = '{"version_policy": {"all": {}}, "backend": "onnxruntime", "max_batch_size": 8}'
    before = server.log().count("successfully loaded 'adder'")
    try:
        client.load_model("adder", config=policy)
        log = server.log()
        assert log.count("successfully loaded 'adder'") == before + 1
        assert re.search(r"loaded 'adder' version 1 \(\d+\.\d\d s\)", log)
        assert re.search(r"loaded 'adder' version 2 \(\d+\.\d\d s\)", log)
    finally:
        client.unload_model("adder")  # forgets the override (a plain load would keep it)
        client.load_model("adder")


def test_concurrent_loads_and_unloads_are_serialised(
    server: RunningServer, client: httpclient.InferenceServerClient
) -> None:
    errors: list[str] = []

    def cycle(i: int) -> None:
        own = httpclient.InferenceServerClient(server.http_url)
        try:
            if i % 2:
                own.load_model("identity_fp32")
            else:
                own.unload_model("identity_fp32")
        except Exception as e:
            errors.append(str(e))

    threads = [threading.Thread(target=cycle, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    client.load_model("identity_fp32")
    assert client.is_model_ready("identity_fp32")
    rows = index_of(client, "identity_fp32")
    assert rows == [{"name": "identity_fp32", "version": "1", "state": "READY"}]


def test_unload_lets_in_flight_requests_finish(
    server: RunningServer, client: httpclient.InferenceServerClient
) -> None:
    client.load_model("slow")
    outcome: dict[str, object] = {}

    def slow_request() -> None:
        try:
            own = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
            outcome["result"] = own.infer("slow", slow_inputs(6000)).as_numpy("Y")
        except Exception as e:
            outcome["error"] = e

    worker = threading.Thread(target=slow_request)
    worker.start()
    time.sleep(0.5)  # the request (seconds long: 6000 rounds of about 0.3 ms or more) is running
    client.unload_model("slow")
    assert index_of(client, "slow")[0]["state"] == "UNLOADING"
    assert not client.is_model_ready("slow")  # no new requests
    worker.join(120)
    assert "error" not in outcome, outcome
    assert outcome["result"] is not None
    wait_for_state(client, "slow", "UNAVAILABLE")


def test_load_retries_are_counted_in_the_log(tmp_path: Path) -> None:
    model = add_identity(tmp_path / "repo", "retried", "FP32")
    (model / "1" / "model.onnx").write_bytes(b"not an onnx file")
    log = tmp_path / "retry.log"
    with running_server(
        [tmp_path / "repo"],
        log,
        "--model-control-mode=explicit",
        "--load-model=retried",
        "--model-load-retry-count=2",
        "--exit-on-error=false",
        "--strict-readiness=false",
    ) as running:
        text = running.log()
    assert "loading 'retried' version 1 failed (attempt 1 of 3)" in text
    assert "loading 'retried' version 1 failed (attempt 2 of 3)" in text
    assert "failed to load 'retried' version 1" in text
