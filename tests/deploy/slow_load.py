"""Closed-loop load on a `slow` model, for the tests that check an autoscaling signal rises under load: `clients`
threads, each sending the next request as soon as the last one is answered.

The model (`add_sleeping_slow`) takes the inputs of tests/e2e/models.add_slow but sleeps ROUND_MS per round
instead of computing: the queue time under load is then set by the clients and the rounds, whatever the machine's
speed (a compute-bound model waits less on a faster machine, and the signal may stay under its target)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import tritonclient.http as httpclient

from e2e.models import slow_inputs, write_config

ROUND_MS = 5

SLEEPING_SLOW = f"""
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            rounds = int(pb_utils.get_input_tensor_by_name(request, "ITERS").as_numpy()[0])
            time.sleep(rounds * {ROUND_MS} / 1000)
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return responses
"""


def add_sleeping_slow(repo: Path, name: str = "slow") -> None:
    """A python model with add_slow's inputs and outputs and 2 instances, each request sleeping ROUND_MS per
    round."""
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(SLEEPING_SLOW)
    write_config(
        repo / name,
        """
backend: "python"
max_batch_size: 0
input [ { name: "ITERS" data_type: TYPE_INT64 dims: [ 1 ] }, { name: "X" data_type: TYPE_FP32 dims: [ 256, 256 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 256, 256 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
""",
    )


def _client_loop(url: str, iterations: int, stop: threading.Event) -> None:
    client = httpclient.InferenceServerClient(url, network_timeout=60)
    try:
        inputs = slow_inputs(iterations)
        while not stop.is_set():
            client.infer("slow", inputs)
    finally:
        client.close()


@contextlib.contextmanager
def closed_loop_load(url: str, clients: int, iterations: int) -> Iterator[None]:
    """Load while inside; on leaving, the clients stop and their last requests have been answered."""
    stop = threading.Event()
    threads = [threading.Thread(target=_client_loop, args=(url, iterations, stop)) for _ in range(clients)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
