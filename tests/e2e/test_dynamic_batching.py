"""Dynamic batching end to end: batches seen through the statistics API, queue policies as HTTP/gRPC errors."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from e2e.models import add_identity, write_config
from e2e.server_process import RunningServer, running_server

# A queue delay no test waits out: a batch that is answered at all went without waiting for it. `SOON` bounds the
# wait for what must go at once, far past an execution on a loaded machine and far short of the delay.
NEVER_US = 600_000_000
SOON = 60.0

# Triton's L0_optional_input optional_identity: OUTPUT<i> = INPUT<i>, each only when its optional input came.
_OPTIONAL_PAIR = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for i in ("0", "1"):
                tensor = pb_utils.get_input_tensor_by_name(request, "INPUT" + i)
                if tensor is not None:
                    outputs.append(pb_utils.Tensor("OUTPUT" + i, tensor.as_numpy()))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""


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
    # Triton's L0_batcher models: preferred sizes 2 and 6 of 8, and a queue delay that never runs out here.
    add_identity(
        repo,
        "preferred_2_6",
        "FP32",
        dims="[ 1 ]",
        extra=f"dynamic_batching {{ max_queue_delay_microseconds: {NEVER_US} preferred_batch_size: [ 2, 6 ] }}\n"
        "instance_group [ { count: 1 kind: KIND_CPU } ]",
    )
    # Triton's L0_optional_input identity_2_float32, as a python model.
    (repo / "optional_pair" / "1").mkdir(parents=True)
    (repo / "optional_pair" / "1" / "model.py").write_text(_OPTIONAL_PAIR)
    write_config(
        repo / "optional_pair",
        'backend: "python"\nmax_batch_size: 4\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] optional: true },\n'
        '        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 1 ] optional: true } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] },\n'
        '         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        f"dynamic_batching {{ max_queue_delay_microseconds: {NEVER_US} preferred_batch_size: [ 4 ] }}\n"
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n",
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
    # The refusal is counted under its reason (checked here: another test would depend on this one's order).
    text = requests.get(f"http://localhost:{batching_server.metrics_port}/metrics", timeout=5).text
    rejected = [
        line
        for line in text.splitlines()
        if line.startswith("nv_inference_request_failure")
        and 'model="tiny_queue"' in line
        and "REJECTED" in line
    ]
    assert rejected and float(rejected[0].rsplit(" ", 1)[1]) >= 1


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


def test_load_duration_gauge(batching_server: RunningServer) -> None:
    assert _metric(batching_server, "nv_model_load_duration_secs", "batched") > 0
    assert _metric(batching_server, "nv_inference_pending_request_count", "batched") == 0


# -- batches that go without waiting out the queue delay (Triton's GetDynamicBatch) -----------------------------


def _fp32_input(name: str, array: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
    tensor.set_data_from_numpy(array)
    return tensor


class Answers:
    """gRPC requests in flight; their answers (or errors) in the order they come, each named by a tag."""

    def __init__(self, server: RunningServer) -> None:
        self.client = grpcclient.InferenceServerClient(server.grpc_url)
        self.came: queue.Queue[tuple[str, Any, Any]] = queue.Queue()

    def send(self, tag: str, model: str, inputs: dict[str, np.ndarray]) -> None:
        tensors = [_fp32_input(name, array) for name, array in inputs.items()]
        outputs = [grpcclient.InferRequestedOutput(name.replace("INPUT", "OUTPUT")) for name in inputs]
        self.client.async_infer(
            model, tensors, lambda result, error: self.came.put((tag, result, error)), outputs=outputs
        )

    def next(self) -> tuple[str, Any]:
        """The next answer, which must come without waiting out the queue delay."""
        try:
            tag, result, error = self.came.get(timeout=SOON)
        except queue.Empty:
            raise AssertionError(f"no answer within {SOON} s: a batch waited for the queue delay") from None
        assert error is None, error
        return tag, result

    def close(self) -> None:
        self.client.close()


def _poll_pending(server: RunningServer, model: str, count: int) -> None:
    deadline = time.monotonic() + SOON
    while _metric(server, "nv_inference_pending_request_count", model) != count:
        assert time.monotonic() < deadline, f"never {count} pending for {model}"
        time.sleep(0.01)


def _batches(server: RunningServer, model: str) -> dict[int, int]:
    client = httpclient.InferenceServerClient(server.http_url)
    stats = client.get_inference_statistics(model)["model_stats"][0]
    client.close()
    return {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]}


def _new_batches(before: dict[int, int], after: dict[int, int]) -> dict[int, int]:
    return {size: count - before.get(size, 0) for size, count in after.items() if count > before.get(size, 0)}


def _rows(count: int, value: float = 1.0) -> np.ndarray:
    return np.full((count, 1), value, dtype=np.float32)


def test_a_request_larger_than_the_largest_preferred_size_goes_at_once(
    batching_server: RunningServer,
) -> None:
    # Triton's L0_batcher test_static_batch_gt_max_preferred: 7 rows, preferred sizes 2 and 6 of 8.
    before = _batches(batching_server, "preferred_2_6")
    answers = Answers(batching_server)
    try:
        result = answers.client.infer(
            "preferred_2_6", [_fp32_input("INPUT0", _rows(7, 3.0))], client_timeout=SOON
        )
        assert result.as_numpy("OUTPUT0").tolist() == _rows(7, 3.0).tolist()
    finally:
        answers.close()
    assert _new_batches(before, _batches(batching_server, "preferred_2_6")) == {7: 1}


def test_a_request_past_the_largest_preferred_size_sends_the_waiting_batch(
    batching_server: RunningServer,
) -> None:
    # Triton's test_multi_batch_gt_max_preferred: 3 rows wait; 7 more would pass 6 (and 8): both go at once.
    before = _batches(batching_server, "preferred_2_6")
    answers = Answers(batching_server)
    try:
        answers.send("three", "preferred_2_6", {"INPUT0": _rows(3)})
        _poll_pending(batching_server, "preferred_2_6", 1)  # waiting for more rows, or for the delay
        seven = answers.client.infer(
            "preferred_2_6", [_fp32_input("INPUT0", _rows(7, 2.0))], client_timeout=SOON
        )
        assert seven.as_numpy("OUTPUT0").tolist() == _rows(7, 2.0).tolist()
        tag, three = answers.next()
        assert tag == "three" and three.as_numpy("OUTPUT0").tolist() == _rows(3).tolist()
    finally:
        answers.close()
    assert _new_batches(before, _batches(batching_server, "preferred_2_6")) == {3: 1, 7: 1}


def test_rows_past_the_largest_preferred_size_send_what_fits_and_the_rest_waits(
    batching_server: RunningServer,
) -> None:
    # Triton's test_multi_batch_sum_gt_max_preferred: 3 + 4 rows fit 8 but pass 6: the 3 go at once and the 4,
    # under every preferred size alone, wait (here until 2 more make the preferred 6, not for the delay).
    before = _batches(batching_server, "preferred_2_6")
    answers = Answers(batching_server)
    try:
        answers.send("three", "preferred_2_6", {"INPUT0": _rows(3)})
        _poll_pending(batching_server, "preferred_2_6", 1)  # waiting for more rows, or for the delay
        answers.send("four", "preferred_2_6", {"INPUT0": _rows(4)})
        assert answers.next()[0] == "three"
        _poll_pending(batching_server, "preferred_2_6", 1)  # the 4 wait alone
        answers.send("two", "preferred_2_6", {"INPUT0": _rows(2)})
        assert {answers.next()[0], answers.next()[0]} == {"four", "two"}
    finally:
        answers.close()
    assert _new_batches(before, _batches(batching_server, "preferred_2_6")) == {3: 1, 6: 1}


@pytest.mark.parametrize("other", [("INPUT1",), ("INPUT0", "INPUT1")], ids=["mix_inputs", "mix_inputs_2"])
def test_a_request_with_other_optional_inputs_sends_the_waiting_batch(
    batching_server: RunningServer, other: tuple[str, ...]
) -> None:
    # Triton's L0_optional_input test_optional_mix_inputs(_2): requests alternate between INPUT0 alone and another
    # set of inputs; each sends the one before it at once (nothing behind it is batched past it). The last waits
    # alone, here until 3 more rows like it make the preferred 4.
    before = _batches(batching_server, "optional_pair")
    answers = Answers(batching_server)
    sets = [("INPUT0",), other, ("INPUT0",), other]
    try:
        for i, names in enumerate(sets):
            answers.send(f"r{i}", "optional_pair", {n: _rows(1, float(i)) for n in names})
            if not i:
                _poll_pending(batching_server, "optional_pair", 1)  # waiting for more rows, or for the delay
            else:  # the one before is answered once this one has come (so that nothing else joins it)
                tag, result = answers.next()
                assert tag == f"r{i - 1}"
                for name in sets[i - 1]:
                    assert result.as_numpy(name.replace("INPUT", "OUTPUT")).tolist() == [[float(i - 1)]]
        answers.send("three", "optional_pair", {n: _rows(3, 9.0) for n in other})
        assert {answers.next()[0], answers.next()[0]} == {"r3", "three"}
    finally:
        answers.close()
    assert _new_batches(before, _batches(batching_server, "optional_pair")) == {1: 3, 4: 1}
