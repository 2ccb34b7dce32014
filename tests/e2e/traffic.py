"""Clients that keep sending while a test changes the server underneath them (reloads, polls, unloads)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable

import tritonclient.http as httpclient

# One request with a client of the thread's own; its result (e.g. which version answered) is collected.
Send = Callable[[httpclient.InferenceServerClient], Hashable]


class Traffic:
    """`clients` threads sending `send` in a closed loop until the `with` block ends."""

    def __init__(self, url: str, send: Send, clients: int = 3) -> None:
        self.ok = 0
        self.answers: set[Hashable] = set()
        self.failures: list[str] = []
        self._url = url
        self._send = send
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run) for _ in range(clients)]

    def _run(self) -> None:
        client = httpclient.InferenceServerClient(self._url)
        while not self._stop.is_set():
            try:
                self.answers.add(self._send(client))
                self.ok += 1
            except Exception as e:
                self.failures.append(str(e))

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()
