"""--model-idle-unload-secs end to end: a model no request used for that long is unloaded, a pinned one stays, and
with --model-load-on-demand the next request loads it again."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import requests

from e2e.models import copy_examples
from e2e.server_process import RunningServer, running_server

IDLE_S = 2


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("idle")
    copy_examples(base / "repo", "simple", "identity_fp32")
    with running_server(
        [base / "repo"],
        base / "server.log",
        "--model-control-mode=explicit",
        "--load-model=identity_fp32",
        f"--model-idle-unload-secs={IDLE_S}",
        "--model-load-on-demand=true",
    ) as running:
        yield running


def _ready(server: RunningServer) -> set[str]:
    url = f"http://127.0.0.1:{server.http_port}/v2/repository/index"
    return {row["name"] for row in requests.post(url, json={"ready": True}, timeout=10).json()}


def _infer_simple(server: RunningServer) -> int:
    body = {
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [2] * 16},
        ]
    }
    url = f"http://127.0.0.1:{server.http_port}/v2/models/simple/infer"
    return requests.post(url, json=body, timeout=60).status_code


def test_an_idle_model_is_unloaded_and_comes_back_on_demand(server: RunningServer) -> None:
    assert _infer_simple(server) == 200  # loaded on demand
    assert _ready(server) == {"identity_fp32", "simple"}
    # Used again before the idle time is up: still loaded.
    time.sleep(IDLE_S / 2)
    assert _infer_simple(server) == 200
    time.sleep(IDLE_S / 2)
    assert "simple" in _ready(server)
    deadline = time.monotonic() + IDLE_S * 5
    while "simple" in _ready(server) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _ready(server) == {"identity_fp32"}  # the pinned model stays
    assert f"unloading 'simple': no request for {IDLE_S:g} s (--model-idle-unload-secs)" in server.log()
    assert _evicted(server)["simple"].endswith(f"unloaded after {IDLE_S:g} s idle (--model-idle-unload-secs)")
    assert _infer_simple(server) == 200
    assert "simple" in _ready(server)
    # Back on demand: the note is gone, and it stays gone when the model is later unloaded for another reason.
    assert "simple" not in _evicted(server)
    url = f"http://127.0.0.1:{server.http_port}/v2/repository/models/simple/unload"
    assert requests.post(url, timeout=30).status_code == 200
    assert "simple" not in _evicted(server)


def _evicted(server: RunningServer) -> dict[str, str]:
    """The repository index's `evicted` notes, by model."""
    url = f"http://127.0.0.1:{server.http_port}/v2/repository/index"
    rows = requests.post(url, timeout=10).json()
    return {row["name"]: row["evicted"] for row in rows if "evicted" in row}
