"""SageMaker's /invocations serving the generate extension: SAGEMAKER_TRITON_INFERENCE_TYPE=generate (one JSON
answer) or generate_stream (server-sent events) for SAGEMAKER_TRITON_DEFAULT_MODEL_NAME, as Triton's qa
(L0_sagemaker) drives its mock_llm. Two servers, one per inference type, started side by side.

The SageMaker listener is served by the engine process in every --frontend-processes mode, so its streams come
event by event in both.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from e2e.server_process import RunningServer, free_ports, start_server
from e2e.sse import ONE_RESPONSE, SSE_CONTENT_TYPE, read_events

PYTHON_MODELS = Path(__file__).parent / "python_models"
UNHANDLED = ("Traceback", "unhandled", "never retrieved", "Exception ignored")


@dataclass
class SageMakerServer:
    server: RunningServer
    port: int

    @property
    def invocations(self) -> str:
        return f"http://127.0.0.1:{self.port}/invocations"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Path:
    root = tmp_path_factory.mktemp("sagemaker_generate") / "models"
    shutil.copytree(
        PYTHON_MODELS / "mock_llm", root / "mock_llm", ignore=shutil.ignore_patterns("__pycache__")
    )
    return root


def _start(repo: Path, log: Path, inference_type: str, port: int) -> SageMakerServer:
    env = {
        **os.environ,
        "SAGEMAKER_TRITON_INFERENCE_TYPE": inference_type,
        "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "mock_llm",
    }
    server = start_server([repo], log, "--allow-sagemaker=true", f"--sagemaker-port={port}", env=env)
    try:
        deadline = time.monotonic() + 30
        while True:  # the SageMaker listener starts after the HTTP one
            try:
                if requests.get(f"http://127.0.0.1:{port}/ping", timeout=1).status_code == 200:
                    return SageMakerServer(server, port)
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, f"SageMaker listener not up:\n{server.log()}"
            time.sleep(0.05)
    except BaseException:
        server.stop()
        raise


@pytest.fixture(scope="module")
def servers(
    repo: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[dict[str, SageMakerServer]]:
    logs = tmp_path_factory.mktemp("log")
    ports = free_ports(2)
    types = ("generate", "generate_stream")
    with ThreadPoolExecutor(2) as pool:
        futures = [
            pool.submit(_start, repo, logs / f"{t}.log", t, p) for t, p in zip(types, ports, strict=True)
        ]
        started = {}
        try:
            for t, future in zip(types, futures, strict=True):
                started[t] = future.result()
            yield started
        finally:
            for future in futures:
                if future.exception() is None:
                    future.result().server.stop()
    for s in started.values():
        log = s.server.log()
        for sign in UNHANDLED:
            assert sign not in log, log


@pytest.fixture(scope="module")
def generate(servers: dict[str, SageMakerServer]) -> SageMakerServer:
    return servers["generate"]


@pytest.fixture(scope="module")
def generate_stream(servers: dict[str, SageMakerServer]) -> SageMakerServer:
    return servers["generate_stream"]


def invoke(s: SageMakerServer, body: dict[str, Any] | bytes, **kwargs: Any) -> requests.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return requests.post(s.invocations, data=data, timeout=30, **kwargs)


def test_generate_answers_json(generate: SageMakerServer) -> None:
    r = invoke(generate, {"PROMPT": "hello world", "STREAM": False})
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/json"
    assert r.json() == {"PARAMS": "{}", "TEXT": "hello world", "model_name": "mock_llm", "model_version": "1"}


def test_generate_with_several_answers_is_refused(generate: SageMakerServer) -> None:
    r = invoke(generate, {"PROMPT": "hello world", "STREAM": True, "parameters": {"REPETITION": 3}})
    assert r.status_code == 400
    assert r.headers["Content-Type"] == "application/json"
    assert r.json() == {"error": ONE_RESPONSE}


def test_generate_stream_answers_events(generate_stream: SageMakerServer) -> None:
    body = {"PROMPT": "hello world", "STREAM": True, "parameters": {"REPETITION": 3}}
    with invoke(generate_stream, body, stream=True) as r:
        assert r.status_code == 200, r.text
        assert r.headers["Content-Type"] == SSE_CONTENT_TYPE
        payloads = [e.json() for e in read_events(r)]
    expected = {
        "PARAMS": '{"REPETITION": 3}',
        "TEXT": "hello world",
        "model_name": "mock_llm",
        "model_version": "1",
    }
    assert payloads == [expected] * 3


def test_generate_stream_events_come_as_they_are_sent(generate_stream: SageMakerServer, tmp_path: Path) -> None:
    # The model holds its second answer back until the client has seen the first (mock_llm's GATE): a listener
    # that kept the events to the end would hold the first too, and the read would time out.
    gate = tmp_path / "gate"
    body = {"PROMPT": "a", "STREAM": True, "parameters": {"REPETITION": 3, "GATE": str(gate)}}
    with invoke(generate_stream, body, stream=True) as r:
        arriving = read_events(r)
        first = next(arriving)
        gate.touch()
        events = [first, *arriving]
    assert len(events) == 3
    assert [e.json()["TEXT"] for e in events] == ["a"] * 3


def test_custom_attributes_reach_the_model(generate: SageMakerServer) -> None:
    headers = {"X-Amzn-SageMaker-Custom-Attributes": "trace=on"}
    r = invoke(generate, {"PROMPT": "a", "STREAM": False}, headers=headers)
    assert r.status_code == 200, r.text
    assert json.loads(r.json()["PARAMS"]) == {"X-Amzn-SageMaker-Custom-Attributes": "trace=on"}


@pytest.mark.parametrize("kind", ["generate", "generate_stream"])
def test_bad_requests(servers: dict[str, SageMakerServer], kind: str) -> None:
    s = servers[kind]
    r = invoke(s, {"PROMPT": 123, "STREAM": True})
    assert r.status_code == 400
    assert r.headers["Content-Type"] == "application/json"
    assert r.json() == {
        "error": "Unable to parse JSON bytes array: attempt to access JSON non-string as string"
    }
    r = invoke(s, b"not json")
    assert r.status_code == 400
    assert r.json()["error"].startswith("failed to parse the request JSON buffer: ")
    r = requests.get(s.invocations, timeout=10)
    assert r.status_code == 405
    assert r.json() == {"error": "Method Not Allowed"}
    # Still serving.
    r = invoke(s, {"PROMPT": "ok", "STREAM": False})
    assert r.status_code == 200, r.text
