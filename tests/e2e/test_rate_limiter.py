"""The rate limiter end to end: one server with --rate-limit=execution_count, python models that report when
each execution started and ended (identity_delay's TIMES), a resource two models share, loads the limiter
refuses, and bad flag values."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from e2e.server_process import RunningServer, running_server

PYTHON_MODELS = Path(__file__).parent / "python_models"
DELAY_MS = 150


def _identity_delay(repo: Path, name: str, instance_groups: str) -> None:
    """A copy of identity_delay under `name` with other instance groups."""
    shutil.copytree(
        PYTHON_MODELS / "identity_delay", repo / name, ignore=shutil.ignore_patterns("__pycache__")
    )
    config = repo / name / "config.pbtxt"
    text = config.read_text().replace('name: "identity_delay"', f'name: "{name}"')
    text = text.replace("instance_group [ { count: 2, kind: KIND_CPU } ]", instance_groups)
    assert instance_groups in text
    config.write_text(text)


def _limited(resources: str, priority: int = 1, count: int = 2) -> str:
    return (
        f"instance_group [ {{ count: {count} kind: KIND_CPU "
        f"rate_limiter {{ resources [ {resources} ] priority: {priority} }} }} ]"
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("rate_limiter") / "models"
    repo.mkdir()
    # Two models, two instances each, sharing one global copy of R: one execution at a time among the four.
    _identity_delay(repo, "shared_a", _limited('{ name: "R" count: 1 global: true }'))
    _identity_delay(repo, "shared_b", _limited('{ name: "R" count: 1 global: true }', priority=2))
    # Asks for 2 copies of BIG where the command line allows 1.
    _identity_delay(repo, "too_big", _limited('{ name: "BIG" count: 2 }', count=1))
    # M both global and per device.
    _identity_delay(
        repo,
        "mixed",
        'instance_group [ { count: 1 kind: KIND_CPU rate_limiter { resources [ { name: "M" count: 1 } ] } }, '
        '{ count: 1 kind: KIND_CPU rate_limiter { resources [ { name: "M" count: 1 global: true } ] } } ]',
    )
    log = tmp_path_factory.mktemp("logs") / "rate_limiter.log"
    with running_server(
        [repo],
        log,
        "--rate-limit=execution_count",
        "--rate-limit-resource=BIG:1",
        "--exit-on-error=false",
        "--strict-readiness=false",
    ) as running:
        yield running


def _infer(server: RunningServer, model: str, value: float) -> tuple[float, float]:
    client = httpclient.InferenceServerClient(server.http_url)
    data = httpclient.InferInput("INPUT0", [2], "FP32")
    data.set_data_from_numpy(np.full(2, value, dtype=np.float32))
    delay = httpclient.InferInput("DELAY_MS", [1], "INT32")
    delay.set_data_from_numpy(np.array([DELAY_MS], dtype=np.int32))
    result = client.infer(model, [data, delay])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full(2, value, dtype=np.float32))
    times = result.as_numpy("TIMES")
    client.close()
    return float(times[0]), float(times[1])


def test_a_shared_resource_caps_executions_across_models(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    pair = ("shared_a", "shared_b")
    before = {m: client.get_inference_statistics(m)["model_stats"][0]["execution_count"] for m in pair}
    models = list(pair) * 3
    with ThreadPoolExecutor(len(models)) as pool:
        spans = list(pool.map(lambda i: _infer(server, models[i], float(i)), range(len(models))))
    # Four idle instances, one copy of R: no two executions overlap, whatever the host's speed.
    spans.sort()
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end
    for model in pair:
        stats = client.get_inference_statistics(model)["model_stats"][0]
        assert stats["execution_count"] - before[model] == 3
    client.close()


def test_loads_the_limiter_cannot_serve_fail_with_the_reason(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["shared_a"]["state"] == "READY" and index["shared_b"]["state"] == "READY"
    assert index["too_big"]["state"] == "UNAVAILABLE"
    assert (
        'Resource count for "BIG" is limited to 1 which will prevent scheduling of one or more model instances, '
        "the minimum required count is 2" in index["too_big"]["reason"]
    )
    assert index["mixed"]["state"] == "UNAVAILABLE"
    assert 'Resource "M" is present as both global and device-specific resource' in index["mixed"]["reason"]
    client.close()


def test_startup_log_names_the_resources(server: RunningServer) -> None:
    log = server.log()
    assert "Rate limiter on (--rate-limit=execution_count)" in log
    assert "| Resource | Device | Count |" in log
    assert "| R        | GLOBAL | 1     |" in log


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--rate-limit=sometimes", "--rate-limit must be off or execution_count, got 'sometimes'"),
        ("--rate-limit-resource=R", "--rate-limit-resource option format is"),
        ("--rate-limit-resource=R:two", "--rate-limit-resource option format is"),
        ("--rate-limit-resource=R:-2", "--rate-limit-resource count must be 0 or more"),
    ],
)
def test_bad_flag_values_stop_the_server(flag: str, message: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "modelhost", "serve", f"--model-repository={tmp_path}", flag],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert message in done.stderr
