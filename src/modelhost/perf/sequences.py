"""The sequences of a load generator (sequence models): each connection / stream runs whole sequences (START on
the first request, END on the last) with sequence ids of its own (the ids of a process are those equal to its
index modulo the process count, and no two slots of a process hold one at once); stopping a level ends every
open sequence."""

from __future__ import annotations

import random

from modelhost.perf.bodies import grpc_sequence_id, with_sequence_id
from modelhost.perf.specs import SequenceSpec


class IdAllocator:
    """The sequence ids of one process: start + index, start + index + count, ... below end, wrapping around;
    an id is handed out again only once released."""

    def __init__(self, spec: SequenceSpec, index: int, count: int) -> None:
        self.first = spec.id_start + index
        self.end = spec.id_end
        self.step = count
        self.next = self.first
        self.in_use: set[int] = set()

    @property
    def capacity(self) -> int:
        return max(0, (self.end - self.first + self.step - 1) // self.step)

    def acquire(self) -> int:
        if len(self.in_use) >= self.capacity:
            raise RuntimeError("no free sequence id left in --sequence-id-range")
        while True:
            candidate = self.next
            self.next += self.step
            if self.next >= self.end:
                self.next = self.first
            if candidate not in self.in_use:
                self.in_use.add(candidate)
                return candidate

    def release(self, sequence_id: int) -> None:
        self.in_use.discard(sequence_id)


class SequenceSlot:
    """One connection's / stream's sequences: whole sequences one after the other, each with an id of its own."""

    def __init__(self, spec: SequenceSpec, ids: IdAllocator, rng: random.Random, streams: list[int]) -> None:
        self.spec = spec
        self.ids = ids
        self.rng = rng
        self.streams = streams  # [next stream index], shared by the slots of a process (round-robin)
        self.sequence_id = 0  # 0: none held
        self.stream: list[list[tuple[bytes, int]]] = []
        self.position = 0
        self.remaining = 0

    @property
    def open(self) -> bool:
        """A sequence was started and its END not sent yet."""
        return self.remaining > 0 and self.position > 0

    def _begin(self) -> None:
        self.release()
        self.sequence_id = self.ids.acquire()
        index = self.streams[0]
        self.streams[0] = (index + 1) % len(self.spec.templates)
        self.stream = self.spec.templates[index]
        variation = self.spec.variation_pct / 100
        length = self.spec.length * self.rng.uniform(1 - variation, 1 + variation)
        self.remaining = max(1, round(length))
        self.position = 0

    def _build(self, start: bool, end: bool) -> bytes:
        template, id_offset = self.stream[self.position % len(self.stream)][start * 2 + end]
        self.position += 1
        if id_offset >= 0:
            return with_sequence_id(template, id_offset, self.sequence_id)
        return template + grpc_sequence_id(self.sequence_id)

    def next(self) -> bytes:
        if self.remaining == 0:
            self._begin()
        start = self.position == 0
        self.remaining -= 1
        return self._build(start, self.remaining == 0)

    def close(self) -> bytes | None:
        """The request that ends the open sequence early (END flag), or None."""
        if not self.open:
            return None
        self.remaining = 0
        return self._build(False, True)

    def release(self) -> None:
        """Gives the id back (once the sequence's END was answered)."""
        if self.sequence_id and not self.open:
            self.ids.release(self.sequence_id)
            self.sequence_id = 0
