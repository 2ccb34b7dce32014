"""Poll mode through tritonclient: models and versions added, changed and removed while clients keep sending."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from e2e.clients import poll
from e2e.models import add_identity, add_versioned_add
from e2e.server_process import RunningServer, running_server
from e2e.traffic import Traffic

POLL_SECS = 1


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Path:
    root = tmp_path_factory.mktemp("poll_repo")
    add_versioned_add(root, "counter", (1,), "{ latest { num_versions: 1 } }")
    add_versioned_add(root, "shrinking", (1, 2), "{ latest { num_versions: 1 } }")
    add_identity(root, "changing", "FP32")
    add_identity(root, "leaving", "FP32")
    return root


@pytest.fixture(scope="module")
def staging(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Path:
    """Where new model files are built before they are moved into the repository in one rename each."""
    return tmp_path_factory.mktemp("staging")


@pytest.fixture(scope="module")
def server(
    repo: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("logs") / "poll.log"
    with running_server(
        [repo], log, "--model-control-mode=poll", f"--repository-poll-secs={POLL_SECS}"
    ) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: RunningServer, frontend_processes: int) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.http_url)


def add_request(client: httpclient.InferenceServerClient, model: str) -> int:
    """Which version answered: the add models add their version number."""
    data = np.zeros((1, 4), dtype=np.int32)
    inp = httpclient.InferInput("INPUT0", [1, 4], "INT32")
    inp.set_data_from_numpy(data)
    return int(client.infer(model, [inp]).as_numpy("OUTPUT0")[0, 0])


def rows_of(client: httpclient.InferenceServerClient, name: str) -> list[dict[str, str]]:
    return [row for row in client.get_model_repository_index() if row["name"] == name]


def eventually(check: Callable[[], bool], what: str, timeout: float = 15) -> None:
    poll(check, timeout, what)


def add_version(repo: Path, staging: Path, model: str, source: Path, version: int) -> None:
    staged = staging / f"{model}-{version}"
    shutil.copytree(source, staged)
    staged.rename(repo / model / str(version))


def test_load_and_unload_requests_are_refused(server: RunningServer) -> None:
    for action in ("load", "unload"):
        response = requests.post(
            f"http://{server.http_url}/v2/repository/models/counter/{action}", timeout=10
        )
        assert response.status_code == 503
        assert response.json()["error"] == "explicit model load / unload is not allowed if polling is enabled"
    with pytest.raises(InferenceServerException, match="not allowed if polling is enabled"):
        grpcclient.InferenceServerClient(server.grpc_url).load_model("counter")


def test_a_new_version_replaces_the_old_one_under_traffic(
    server: RunningServer, client: httpclient.InferenceServerClient, repo: Path, staging: Path
) -> None:
    assert add_request(client, "counter") == 1
    with Traffic(server.http_url, lambda c: add_request(c, "counter")) as traffic:
        time.sleep(0.3)
        # Version 2 of "counter" is version 2 of "shrinking": it adds 2.
        add_version(repo, staging, "counter", repo / "shrinking" / "2", 2)
        eventually(lambda: add_request(client, "counter") == 2, "version 2 to serve")
        time.sleep(0.3)
    assert traffic.failures == []
    assert traffic.answers == {1, 2}
    eventually(
        lambda: (
            rows_of(client, "counter")
            == [
                {"name": "counter", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
                {"name": "counter", "version": "2", "state": "READY"},
            ]
        ),
        "version 1 to be unloaded",
    )


def test_a_removed_version_gives_way_to_the_previous_one(
    server: RunningServer, client: httpclient.InferenceServerClient, repo: Path, staging: Path
) -> None:
    assert add_request(client, "shrinking") == 2
    with Traffic(server.http_url, lambda c: add_request(c, "shrinking")) as traffic:
        time.sleep(0.3)
        (repo / "shrinking" / "2").rename(staging / "shrinking-2-removed")
        eventually(lambda: add_request(client, "shrinking") == 1, "version 1 to serve")
        time.sleep(0.3)
    assert traffic.failures == []
    assert traffic.answers == {1, 2}


def test_a_changed_config_is_reloaded(client: httpclient.InferenceServerClient, repo: Path) -> None:
    config = repo / "changing" / "config.pbtxt"
    assert client.get_model_config("changing")["max_batch_size"] == 8
    config.write_text(config.read_text().replace("max_batch_size: 8", "max_batch_size: 4"))
    eventually(lambda: client.get_model_config("changing")["max_batch_size"] == 4, "the new config")


def test_a_broken_change_leaves_the_model_serving_and_is_not_retried(
    server: RunningServer, client: httpclient.InferenceServerClient, repo: Path
) -> None:
    config = repo / "changing" / "config.pbtxt"
    good = config.read_text()
    config.write_text(good.replace("max_batch_size:", "max_batch_size: -2 #"))
    eventually(lambda: "failed to reload 'changing'" in server.log(), "the failed reload")
    failures = server.log().count("failed to reload 'changing'")
    time.sleep(2.5 * POLL_SECS)  # more polls, same files: no new attempt
    assert server.log().count("failed to reload 'changing'") == failures
    assert client.is_model_ready("changing")
    config.write_text(re.sub(r"max_batch_size: \d+", "max_batch_size: 2", good))
    eventually(lambda: client.get_model_config("changing")["max_batch_size"] == 2, "the repaired config")


def test_a_new_model_is_loaded(client: httpclient.InferenceServerClient, repo: Path, staging: Path) -> None:
    add_identity(staging, "arriving", "FP32")
    (staging / "arriving").rename(repo / "arriving")
    eventually(lambda: client.is_model_ready("arriving"), "the new model")


def test_a_removed_model_is_unloaded(
    client: httpclient.InferenceServerClient, repo: Path, staging: Path
) -> None:
    assert client.is_model_ready("leaving")
    (repo / "leaving").rename(staging / "leaving")
    eventually(lambda: not client.is_model_ready("leaving"), "the model to go")
    eventually(lambda: rows_of(client, "leaving") == [], "the model to leave the index, as in Triton")
    with pytest.raises(InferenceServerException):
        client.get_model_metadata("leaving")
    assert client.is_server_ready()
