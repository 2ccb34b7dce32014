"""`modelhost sagemaker` end to end, as a SageMaker container runs its entry: the environment picks the model,
the port and the mode; the SageMaker API answers and the HTTP API is off."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from e2e.models import copy_examples
from e2e.server_process import free_ports


@pytest.fixture(autouse=True, scope="module")
def frontend_processes() -> int:
    """Overrides the conftest's two modes: the entry starts the server with SageMaker's own flags."""
    return 0


def _wait_for_ping(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the entry exited with {process.returncode}:\n{log.read_text()}")
        try:
            if requests.get(f"http://127.0.0.1:{port}/ping", timeout=1).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"no answer on /ping:\n{log.read_text()}")


def _entry(env: dict[str, str], log: Path) -> Iterator[int]:
    (port,) = free_ports(1)
    environment = {**os.environ, **env, "SAGEMAKER_BIND_TO_PORT": str(port), "PYTHONUNBUFFERED": "1"}
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "modelhost", "sagemaker"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=environment,
        )
    try:
        _wait_for_ping(process, port, log)
        yield port
    finally:
        process.terminate()
        assert process.wait(30) == 0


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    base = tmp_path_factory.mktemp("single")
    copy_examples(base / "model", "simple")
    log = base / "entry.log"
    for port in _entry({"MODELHOST_SAGEMAKER_MODEL_DIR": str(base / "model")}, log):
        yield port, log


def test_single_model_endpoint(single: tuple[int, Path]) -> None:
    port, log = single
    body = {
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": [3] * 16},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16},
        ]
    }
    answer = requests.post(f"http://127.0.0.1:{port}/invocations", json=body, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"][0]["data"] == [4] * 16
    text = log.read_text()
    assert "WARNING: No SAGEMAKER_TRITON_DEFAULT_MODEL_NAME provided." in text  # the script's words
    assert "--allow-sagemaker=true --allow-http=false --model-control-mode=explicit" in text
    assert "Started HTTPService" not in text  # the KServe HTTP API is off, as in Triton's container


def test_multi_model_endpoint(tmp_path: Path) -> None:
    root = tmp_path / "models"
    copy_examples(root / "abc123" / "model", "simple")
    env = {"SAGEMAKER_MULTI_MODEL": "true", "MODELHOST_SAGEMAKER_MODEL_ROOT": str(root)}
    for port in _entry(env, tmp_path / "entry.log"):
        url = f"http://127.0.0.1:{port}"
        load = {"model_name": "abc123", "url": f"{root}/abc123/model"}
        assert requests.post(f"{url}/models", json=load, timeout=60).status_code == 200
        assert requests.get(f"{url}/models", timeout=10).json()["models"][0]["modelName"] == "abc123"
        assert requests.delete(f"{url}/models/abc123", timeout=60).status_code == 200
    assert "Triton is running in SageMaker MME mode" in (tmp_path / "entry.log").read_text()


def test_an_entry_error_exits_1_before_the_server_starts(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    environment = {**os.environ, "MODELHOST_SAGEMAKER_MODEL_DIR": str(tmp_path / "model")}
    done = subprocess.run(
        [sys.executable, "-m", "modelhost", "sagemaker"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
    )
    assert done.returncode == 1
    assert "ERROR: Incorrect directory structure." in done.stderr
