"""Dynamic batching end to end: batches seen through the statistics API, queue policies as HTTP/gRPC errors."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from e2e.models import add_identity
from e2e.server_process import RunningServer, running_server


@pytest.fixture(scope="module")
def batching_server(
    tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("batching_repo")
    add_identity(
        repo,
        "batched",
        "FP32",
        dims="[ 4 ]",
        extra="dynamic_batching { max_queue_delay_microseconds: 300000 preferred_batch_size: [ 4 ] }\n"
        "instance_group [ { count: 1 kind: KIND_CPU } ]",
    )
    add_identity(
        repo,
        "tiny_queue",
        "FP32",
        dims="[ -1 ]",
        extra="dynamic_batching { max_queue_delay_microseconds: 400000 preferred_batch_size: [ 8 ] "
        "default_queue_policy { max_queue_size: 2 } }\ninstance_group [ { count: 1 kind: KIND_CPU } ]",
    )
    with running_server([repo], tmp_path_factory.mktemp("log") / "server.log") as server:
        yield server


def _input(value: float, width: int = 4) -> list[httpclient.InferInput]:
    tensor = httpclient.InferInput("INPUT0", [1, width], "FP32")
    tensor.set_data_from_numpy(np.full((1, width), value, dtype=np.float32))
    return [tensor]


def test_concurrent_requests_run_as_one_batch(batching_server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(batching_server.http_url, concurrency=4)
    before = client.get_inference_statistics("batched")["model_stats"][0]
    pending = [client.async_infer("batched", _input(float(i))) for i in range(4)]
    results = [p.get_result().as_numpy("OUTPUT0") for p in pending]
    for i, out in enumerate(results):
        np.testing.assert_array_equal(out, np.full((1, 4), float(i), dtype=np.float32))
    after = client.get_inference_statistics("batched")["model_stats"][0]
    assert after["execution_count"] - before["execution_count"] == 1
    assert after["inference_count"] - before["inference_count"] == 4
    assert [b["batch_size"] for b in after["batch_stats"]] == [4]
    assert after["inference_stats"]["queue"]["ns"] > 0
    client.close()


def test_full_queue_answers_503_and_others_are_served(batching_server: RunningServer) -> None:
    results: dict[int, np.ndarray] = {}

    def queued(i: int) -> None:
        client = httpclient.InferenceServerClient(batching_server.http_url)
        results[i] = client.infer("tiny_queue", _input(float(i), width=3)).as_numpy("OUTPUT0")

    waiting = [threading.Thread(target=queued, args=(i,)) for i in range(2)]
    for t in waiting:
        t.start()
    time.sleep(0.15)  # both wait in the queue for a preferred batch of 8 (400 ms delay)
    assert _metric(batching_server, "nv_inference_pending_request_count", "tiny_queue") == 2
    client = httpclient.InferenceServerClient(batching_server.http_url)
    with pytest.raises(InferenceServerException) as e:
        client.infer("tiny_queue", _input(9.0, width=3))
    assert (e.value.status(), e.value.message()) == ("503", "Exceeds maximum queue size")
    for t in waiting:
        t.join(10)
    assert sorted(results) == [0, 1]
    assert all(r.shape == (1, 3) for r in results.values())
    stats = client.get_inference_statistics("tiny_queue")["model_stats"][0]
    assert stats["inference_stats"]["fail"]["count"] >= 1
    assert _metric(batching_server, "nv_inference_pending_request_count", "tiny_queue") == 0


def test_grpc_clients_each_get_their_own_rows(batching_server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(batching_server.grpc_url)
    answers: dict[int, np.ndarray] = {}

    def call(i: int) -> None:
        tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        tensor.set_data_from_numpy(np.full((1, 4), float(i), dtype=np.float32))
        answers[i] = client.infer("batched", [tensor]).as_numpy("OUTPUT0")

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for i in range(8):
        np.testing.assert_array_equal(answers[i], np.full((1, 4), float(i), dtype=np.float32))


def _metric(server: RunningServer, family: str, model: str) -> float:
    text = requests.get(f"http://localhost:{server.metrics_port}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith(family + "{") and f'model="{model}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{family} for {model} not found")


def test_failure_reason_label(batching_server: RunningServer) -> None:
    text = requests.get(f"http://localhost:{batching_server.metrics_port}/metrics", timeout=5).text
    rejected = [
        line
        for line in text.splitlines()
        if line.startswith("nv_inference_request_failure")
        and 'model="tiny_queue"' in line
        and "REJECTED" in line
    ]
    assert rejected and float(rejected[0].rsplit(" ", 1)[1]) >= 1


def test_load_duration_gauge(batching_server: RunningServer) -> None:
    assert _metric(batching_server, "nv_model_load_duration_secs", "batched") > 0
    assert _metric(batching_server, "nv_inference_pending_request_count", "batched") == 0
