"""Closed-loop load on the `slow` model (tests/e2e/models.add_slow), for the tests that check an autoscaling
signal rises under load: `clients` threads, each sending the next request as soon as the last one is answered."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import tritonclient.http as httpclient

from e2e.models import slow_inputs


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
