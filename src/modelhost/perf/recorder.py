"""What a load-generator process records of the requests answered, until the parent collects a window of them."""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np


class Recorder:
    """Timestamps of answered requests, and the sums of client send/receive time."""

    def __init__(self, streaming: bool = False) -> None:
        self.streaming = streaming
        self.starts = array("q")
        self.ends = array("q")
        self.firsts = array("q")  # streaming: the time of each request's first response
        self.counts = array("q")  # streaming: the number of responses of each request
        self.send_ns = 0
        self.recv_ns = 0
        self.errors = 0
        self.first_error = ""

    def error(self, message: str) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = message

    def collect(self, t0: int, t1: int) -> tuple[Any, ...]:
        def values(a: array[int]) -> np.ndarray:
            return np.frombuffer(a, dtype=np.int64).copy() if a else np.zeros(0, np.int64)

        starts, ends, firsts, counts = (values(a) for a in (self.starts, self.ends, self.firsts, self.counts))
        inside = (ends >= t0) & (ends < t1)
        later = ends >= t1
        self.starts = array("q", starts[later].tobytes())
        self.ends = array("q", ends[later].tobytes())
        if self.streaming:
            self.firsts = array("q", firsts[later].tobytes())
            self.counts = array("q", counts[later].tobytes())
            firsts, counts = firsts[inside], counts[inside]
        count = int(inside.sum())
        reply = (
            "window",
            starts[inside].tobytes(),
            ends[inside].tobytes(),
            self.send_ns,
            self.recv_ns,
            count,
            self.errors,
            self.first_error,
            firsts.tobytes() if self.streaming else b"",
            counts.tobytes() if self.streaming else b"",
        )
        self.send_ns = self.recv_ns = 0
        self.errors = 0
        self.first_error = ""
        return reply
