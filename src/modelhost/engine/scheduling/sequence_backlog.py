"""The backlog of a sequence batcher: sequences beyond the slots wait here, in arrival order, for a slot to free up
(at END, at idle release after `max_sequence_idle_microseconds`, or when a queued request of a sequence is
cancelled), and queue their requests meanwhile.

A request's `timeout` applies to a sequence in the backlog only: the sequence expires at the earliest deadline of
its queued requests (Triton's rule); once in a slot, its requests wait without a deadline.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib

from modelhost.engine.scheduling.sequence_slots import Sequence


class Backlog:
    """The sequences waiting for a slot; `requests`: those they queued."""

    __slots__ = ("deadline_changed", "requests", "sequences")

    def __init__(self) -> None:
        self.sequences: collections.deque[Sequence] = collections.deque()  # in arrival order
        self.requests = 0
        self.deadline_changed = asyncio.Event()  # a backlogged sequence's deadline came sooner

    def __len__(self) -> int:
        return len(self.sequences)

    def append(self, sequence: Sequence) -> None:
        self.sequences.append(sequence)

    def remove(self, sequence: Sequence) -> None:
        """A sequence ended while waiting (cancelled, expired) leaves the backlog."""
        with contextlib.suppress(ValueError):
            self.sequences.remove(sequence)

    def shorten(self, sequence: Sequence, deadline_ns: int) -> None:
        """A request with a timeout joined the sequence: it expires at `deadline_ns` if that is sooner."""
        if not sequence.expires_ns or deadline_ns < sequence.expires_ns:
            sequence.expires_ns = deadline_ns
            self.deadline_changed.set()

    def pop(self) -> Sequence | None:
        """The oldest waiting sequence that still has requests, out of the backlog with them (their deadline
        gone), or None; sequences cancelled in the backlog are dropped on the way."""
        while self.sequences:
            waiting = self.sequences.popleft()
            if not waiting.queue:  # cancelled in the backlog
                continue
            self.requests -= len(waiting.queue)
            waiting.expires_ns = 0  # in a slot, its requests wait without a deadline (Triton)
            return waiting
        return None

    def expired(self, now_ns: int) -> tuple[list[Sequence], int | None]:
        """The sequences whose deadline has passed, and how long until the next deadline (None: no deadline)."""
        expired: list[Sequence] = []
        next_ns: int | None = None
        for sequence in self.sequences:
            if not sequence.expires_ns:
                continue
            if sequence.expires_ns <= now_ns:
                expired.append(sequence)
            elif next_ns is None or sequence.expires_ns - now_ns < next_ns:
                next_ns = sequence.expires_ns - now_ns
        return expired, next_ns

    def waiting(self) -> list[Sequence]:
        return list(self.sequences)

    def clear(self) -> None:
        self.sequences.clear()
