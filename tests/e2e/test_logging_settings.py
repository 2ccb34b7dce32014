"""The logging extension over HTTP and gRPC, checked against what the server then writes to --log-file."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from e2e.models import copy_examples
from e2e.server_process import RunningServer, running_server


@pytest.fixture(scope="module")
def logged_server(
    tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[tuple[RunningServer, Path]]:
    repo = tmp_path_factory.mktemp("repo")
    copy_examples(repo, "simple")
    log_dir = tmp_path_factory.mktemp("log")
    log_file = log_dir / "modelhost.log"
    with running_server([repo], log_dir / "stdout.log", f"--log-file={log_file}") as server:
        yield server, log_file


def _fail_request(server: RunningServer, marker: str) -> None:
    r = requests.post(f"http://{server.http_url}/v2/models/{marker}/infer", json={"inputs": []}, timeout=5)
    assert r.status_code == 404


def _logged(log_file: Path, marker: str) -> bool:
    time.sleep(0.2)
    return marker in log_file.read_text()


def test_http_get_and_update(logged_server: tuple[RunningServer, Path]) -> None:
    server, log_file = logged_server
    client = httpclient.InferenceServerClient(server.http_url)
    settings = client.get_log_settings()
    assert settings == {
        "log_file": str(log_file),
        "log_info": True,
        "log_warning": True,
        "log_error": True,
        "log_verbose_level": 0,
        "log_format": "default",
    }
    _fail_request(server, "marker_one")
    assert _logged(log_file, "marker_one")  # a failed request: one info line
    updated = client.update_log_settings({"log_info": False})
    assert updated["log_info"] is False
    _fail_request(server, "marker_two")
    assert not _logged(log_file, "marker_two")
    client.update_log_settings({"log_info": True, "log_format": "ISO8601"})
    _fail_request(server, "marker_three")
    assert _logged(log_file, "marker_three")
    last = [line for line in log_file.read_text().splitlines() if "marker_three" in line][-1]
    assert last[:4].isdigit() and last[10] == "T"  # 2026-11-22T...
    client.update_log_settings({"log_format": "default"})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"log_file": "/tmp/x.log"}, "log file location can not be updated through network protocol"),
        ({"log_info": "yes"}, "expecting a boolean value for 'log_info'"),
        ({"log_verbose_level": -1}, "non-negative integer"),
        ({"log_format": "json"}, "invalid value for 'log_format'"),
        ({"no_such_setting": 1}, "unknown log setting"),
    ],
)
def test_http_bad_updates(
    logged_server: tuple[RunningServer, Path], body: dict[str, object], message: str
) -> None:
    server, _ = logged_server
    r = requests.post(f"http://{server.http_url}/v2/logging", json=body, timeout=5)
    assert r.status_code == 400
    assert message in r.json()["error"]
    assert requests.get(f"http://{server.http_url}/v2/logging", timeout=5).json()["log_info"] is True


def test_grpc(logged_server: tuple[RunningServer, Path]) -> None:
    server, _ = logged_server
    client = grpcclient.InferenceServerClient(server.grpc_url)
    settings = client.get_log_settings(as_json=True)["settings"]
    assert settings["log_verbose_level"] == {"uint32_param": 0}
    updated = client.update_log_settings({"log_verbose_level": 1}, as_json=True)["settings"]
    assert updated["log_verbose_level"] == {"uint32_param": 1}
    client.update_log_settings({"log_verbose_level": 0})
    with pytest.raises(InferenceServerException, match="log file location can not be updated"):
        client.update_log_settings({"log_file": "/tmp/elsewhere.log"})


def test_verbose_level_logs_every_request(logged_server: tuple[RunningServer, Path]) -> None:
    server, log_file = logged_server
    client = httpclient.InferenceServerClient(server.http_url)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
        inputs.append(tensor)
    client.infer("simple", inputs, request_id="quiet_one")
    assert not _logged(log_file, "quiet_one")  # verbose off: a good request writes nothing
    client.update_log_settings({"log_verbose_level": 1})
    try:
        client.infer("simple", inputs, request_id="verbose_one")
        assert _logged(log_file, "[request id: verbose_one] request for model 'simple'")
        text = log_file.read_text()
        assert "HTTP request: POST /v2/models/simple/infer" in text
        assert "inputs: INPUT0 INT32 [1,16], INPUT1 INT32 [1,16]" in text
        assert "[request id: verbose_one] request for model 'simple' version 1 succeeded in" in text
    finally:
        client.update_log_settings({"log_verbose_level": 0})
        client.close()


def test_messages_unescaped_with_tritons_variable(tmp_path: Path) -> None:
    # TRITON_SERVER_ESCAPE_LOG_MESSAGES=0, as tritonserver reads it (Triton's L0_logging): messages as they are.
    repo = tmp_path / "repo"
    copy_examples(repo, "simple")
    marker = 'un"escaped'
    env = {**os.environ, "TRITON_SERVER_ESCAPE_LOG_MESSAGES": "0"}
    with running_server([repo], tmp_path / "server.log", env=env) as server:
        r = requests.post(
            f"http://{server.http_url}/v2/models/{marker}/infer", json={"inputs": []}, timeout=5
        )
        assert r.status_code == 404
        deadline = time.monotonic() + 5
        while marker not in server.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        log = server.log()
    assert "Request for unknown model: 'un\"escaped' is not found" in log  # the quote as it is, not \"
    assert '] "' not in log  # no message quoted
