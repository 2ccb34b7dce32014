"""The slots of a sequence batcher, and the sequences and requests they hold.

A live sequence holds a slot of one instance (a lane), and all its requests run on that instance in arrival order:
a python model keeps its state in that instance's process. Free slots are handed out spread over the instances
first (slot 0 of each instance, then slot 1, ...). An instance update adds lanes, whose slots take backlogged
sequences first, or retires one: its slots take no new sequence, and the lane is gone once its last sequence ends
(as Triton keeps a removed instance for the sequences it holds).
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field

from modelhost.backends.api import Arrays, Job
from modelhost.backends.sequence import CorrelationId
from modelhost.engine.scheduling.instances import Worker


@dataclass(eq=False, slots=True)
class SequenceRequest:
    """A request of a sequence, from its arrival until it is answered."""

    job: Job
    flags: int
    future: asyncio.Future[Arrays]
    enqueued_ns: int
    sequence: Sequence
    taken: bool = False  # in an execution, answered, or dropped
    # oldest.preserve_ordering: its answer, held until every request that arrived before it has its own.
    answer: Arrays | BaseException | None = None

    def resolve(self, answer: Arrays | BaseException) -> None:
        """Hand the caller its answer (unless it went away while the request ran)."""
        if self.future.done():
            return
        if isinstance(answer, BaseException):
            self.future.set_exception(answer)
        else:
            self.future.set_result(answer)


@dataclass(eq=False, slots=True)
class Sequence:
    corrid: CorrelationId
    queue: collections.deque[SequenceRequest] = field(default_factory=collections.deque)
    lane: Lane | None = None  # None: waiting in the backlog
    slot: int = 0
    state: Arrays = field(default_factory=dict)
    last_ns: int = 0
    running: int = 0
    closing: bool = False  # END queued, released or cancelled: no request joins it any more
    # In the backlog: when the earliest timeout of its queued requests passes (perf_counter_ns; 0: none).
    expires_ns: int = 0


@dataclass(eq=False, slots=True)
class Lane:
    """One instance and its slots."""

    index: int
    worker: Worker
    slots: list[Sequence | None]
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    # Retired by an instance update: its slots take no new sequence; resolved once the last one ends.
    emptied: asyncio.Future[None] | None = None


class SequenceSlots:
    """The lanes of a model's instances and the sequence in each slot; `requests`: those queued in slots."""

    __slots__ = ("_free", "_last_index", "lanes", "per_lane", "requests")

    def __init__(self, workers: list[Worker], per_lane: int) -> None:
        self.per_lane = per_lane
        self._last_index = len(workers) - 1  # the last lane index handed out
        self.lanes: dict[int, Lane] = {i: Lane(i, w, [None] * per_lane) for i, w in enumerate(workers)}
        # Free slots, spread over the instances first (slot 0 of each instance, then slot 1, ...).
        self._free: list[tuple[int, int]] = sorted(
            ((s, lane.index) for lane in self.lanes.values() for s in range(per_lane)), reverse=True
        )
        self.requests = 0

    def take(self, sequence: Sequence) -> Lane | None:
        """A free slot for the sequence: its lane, or None when every slot is held."""
        if not self._free:
            return None
        slot, index = self._free.pop()
        lane = self.lanes[index]
        sequence.lane, sequence.slot = lane, slot
        lane.slots[slot] = sequence
        return lane

    @staticmethod
    def assign(sequence: Sequence, lane: Lane, slot: int) -> None:
        sequence.lane, sequence.slot = lane, slot
        lane.slots[slot] = sequence

    @staticmethod
    def vacate(sequence: Sequence) -> Lane | None:
        """Empty the sequence's slot; its lane, or None when the slot was released already."""
        lane = sequence.lane
        if lane is None or lane.slots[sequence.slot] is not sequence:
            return None
        lane.slots[sequence.slot] = None
        return lane

    def free(self, lane: Lane, slot: int) -> None:
        """The slot goes back to the free ones (no sequence waits for it)."""
        self._free.append((slot, lane.index))
        self._free.sort(reverse=True)

    def add(self, worker: Worker) -> Lane:
        """A new instance's lane, its slots empty and not yet free: the batcher hands each out."""
        self._last_index += 1
        lane = Lane(self._last_index, worker, [None] * self.per_lane)
        self.lanes[lane.index] = lane
        return lane

    def retire(self, worker: Worker) -> asyncio.Future[None]:
        """That instance's slots take no new sequence; resolves once none is left (`drop_if_empty`)."""
        lane = next(lane for lane in self.lanes.values() if lane.worker is worker)
        emptied: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        lane.emptied = emptied
        self._free = [(slot, index) for slot, index in self._free if index != lane.index]
        self.drop_if_empty(lane)
        return emptied

    def drop_if_empty(self, lane: Lane) -> None:
        """A retired lane whose last sequence ended is gone."""
        if lane.emptied is None or any(s is not None for s in lane.slots):
            return
        del self.lanes[lane.index]
        lane.arrived.set()  # its dispatcher sees no sequence and ends
        if not lane.emptied.done():
            lane.emptied.set_result(None)

    def held(self) -> int:
        """Sequences holding a slot."""
        return sum(1 for lane in self.lanes.values() for s in lane.slots if s is not None)

    def sequences_on(self, worker: Worker) -> int:
        """Sequences holding a slot of that instance."""
        return sum(
            1 for lane in self.lanes.values() if lane.worker is worker for s in lane.slots if s is not None
        )

    def idle(self, now_ns: int, idle_ns: int) -> tuple[list[Sequence], int, bool]:
        """The sequences in slots that sent nothing for `idle_ns` (their slots to be released), how long until the
        next one may be idle (at most `idle_ns`), and whether any live sequence holds a slot."""
        idle: list[Sequence] = []
        wait_ns = idle_ns
        held = False
        for lane in self.lanes.values():
            for sequence in lane.slots:
                if sequence is None or sequence.closing:
                    continue
                held = True
                if sequence.queue or sequence.running:
                    continue  # looked at again once idle: its last_ns moves at completion
                remaining = sequence.last_ns + idle_ns - now_ns
                if remaining <= 0:
                    idle.append(sequence)
                else:
                    wait_ns = min(wait_ns, remaining)
        return idle, wait_ns, held

    def occupied(self) -> list[Sequence]:
        return [s for lane in self.lanes.values() for s in lane.slots if s is not None]

    def close(self) -> None:
        """Unload: every slot empty, every dispatcher stopped, every retired lane's wait over."""
        for lane in self.lanes.values():
            lane.slots = [None] * len(lane.slots)
            if lane.task is not None:
                lane.task.cancel()
            if lane.emptied is not None and not lane.emptied.done():
                lane.emptied.set_result(None)
