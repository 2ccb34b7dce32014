"""Batch forming of the sequence batcher: which requests of an instance's slots run together now, Triton's two
strategies (`sequence_batching` in the config).

- `direct` (the default): slots per instance = max_batch_size (1 without batching); the present requests of the
  slots of one instance run together, in slot order, each at its slot's row (empty slots below the highest one
  held are padded), waiting up to `direct.max_queue_delay_microseconds` for `minimum_slot_utilization` of the slots;
- `oldest`: `max_candidate_sequences` slots per instance, batched oldest first up to max_batch_size, a preferred
  size going at once, otherwise waiting up to `oldest.max_queue_delay_microseconds`.

Either way a batch takes at most one request per sequence, and only a sequence whose previous request has
completed: its next request reads the state the previous one wrote.

Test hooks, as Triton's: `TRITONSERVER_DELAY_SCHEDULER=N` holds every execution until N requests are queued in
slots, `TRITONSERVER_BACKLOG_DELAY_SCHEDULER=M` until M requests wait in the backlog (Triton reads the latter only
with the former set; here either works alone); once reached, they are spent.
"""

from __future__ import annotations

import os
from typing import Any

from modelhost.engine.scheduling.dynamic_batcher import batch_key
from modelhost.engine.scheduling.sequence_slots import Lane, SequenceRequest


class SequenceStrategy:
    """`request_level`: the instances take requests one by one (python models), so requests of other shapes may
    share a batch; otherwise rows are concatenated and must agree in shape."""

    __slots__ = (
        "_backlog_delay_n",
        "_delay_n",
        "delay_ns",
        "hooked",
        "max_rows",
        "min_utilization",
        "oldest",
        "per_lane",
        "preferred",
        "request_level",
        "slot_rows",
    )

    def __init__(self, config: Any, request_level: bool) -> None:
        sb = config.sequence_batching
        self.request_level = request_level
        self.max_rows = max(1, int(config.max_batch_size))
        self.oldest = sb.HasField("oldest")
        if self.oldest:
            self.per_lane = max(1, int(sb.oldest.max_candidate_sequences) or self.max_rows)
            self.delay_ns = int(sb.oldest.max_queue_delay_microseconds) * 1000
            self.preferred = {int(p) for p in sb.oldest.preferred_batch_size if 0 < p <= self.max_rows}
            self.min_utilization = 0.0
        else:
            self.per_lane = self.max_rows
            self.delay_ns = int(sb.direct.max_queue_delay_microseconds) * 1000
            self.preferred = set()
            self.min_utilization = float(sb.direct.minimum_slot_utilization)
        # The direct strategy with batching: each request at its slot's row.
        self.slot_rows = int(config.max_batch_size) > 0 and not self.oldest
        self._delay_n = _env_count("TRITONSERVER_DELAY_SCHEDULER")
        self._backlog_delay_n = _env_count("TRITONSERVER_BACKLOG_DELAY_SCHEDULER")

        # The test hooks are set and not yet spent: they hold every instance's executions (their counts are the
        # batcher's), so that `held` is asked.
        self.hooked = bool(self._delay_n or self._backlog_delay_n)

    def held(self, in_slots: int, in_backlog: int) -> bool:
        """Whether the test hooks still hold every execution, with these requests queued in slots and backlog."""
        if (self._delay_n and in_slots < self._delay_n) or (
            self._backlog_delay_n and in_backlog < self._backlog_delay_n
        ):
            return True
        self._delay_n = self._backlog_delay_n = 0  # once reached, the hooks are spent (as Triton's)
        self.hooked = False
        return False

    @staticmethod
    def heads(lane: Lane) -> list[SequenceRequest]:
        """The next request of each sequence in the lane's slots whose previous request has completed: the
        instance is released before the completion callback runs, and the next request must read the state that
        its predecessor wrote (a backlogged sequence's requests, or a stream's, queue up back to back)."""
        return [s.queue[0] for s in lane.slots if s is not None and s.queue and not s.running]

    def choose(self, lane: Lane, force: bool) -> list[SequenceRequest] | None:
        """The requests to run now, at most one per sequence, or None to wait for more (`force`: the oldest has
        waited out the delay)."""
        heads = self.heads(lane)
        if not heads:
            return []
        heads.sort(key=lambda r: r.enqueued_ns)
        if len(heads) > 1 and not self.request_level:
            # Rows are concatenated: only requests whose inputs (and states, which may grow step by step) have
            # the oldest one's shapes go together.
            key = _shapes(heads[0])
            heads = [r for r in heads if _shapes(r) == key]
        if self.oldest:
            if len(heads) >= self.max_rows or force or not self.delay_ns:
                return heads[: self.max_rows]
            best = max((p for p in self.preferred if p <= len(heads)), default=0)
            return heads[:best] if best else None
        # Rows in slot order, as Triton's direct strategy: a model keeping state per batch slot (Triton's own
        # sequence test backend) finds each sequence at its slot's row while the slots below it are occupied.
        heads.sort(key=lambda r: r.sequence.slot)
        # Triton's rule: without both a queue delay and a minimum slot utilization, at once; else once that share
        # of the instance's slots has a request, or the oldest has waited out the delay.
        if force or not self.delay_ns or not self.min_utilization:
            return heads
        if len(heads) / len(lane.slots) >= self.min_utilization:
            return heads
        return None

    def rows(self, runnable: list[SequenceRequest], lane: Lane) -> tuple[list[int], int]:
        """The row of each request, and the rows of the batch: its slot's index with the direct strategy (Triton
        pads the empty slots below the highest one used with null rows, so that a model keeping state per slot
        finds each sequence at its slot's row), else its place in the batch."""
        if not self.slot_rows:
            return list(range(len(runnable))), len(runnable)
        rows = [r.sequence.slot for r in runnable]
        # Triton's direct strategy pads up to the highest slot holding a sequence, whether or not that sequence
        # has a request in this batch (waiting for its next one, or of another shape).
        highest = max(i for i, s in enumerate(lane.slots) if s is not None)
        return rows, max(max(rows), highest) + 1


def _shapes(request: SequenceRequest) -> tuple[Any, ...]:
    state = request.sequence.state
    return (batch_key(request.job.inputs), *((name, state[name].shape) for name in sorted(state)))


def _env_count(name: str) -> int:
    """A test-hook count from the environment (Triton reads it with atoi: junk is 0, which disables it)."""
    raw = os.environ.get(name, "")
    try:
        return max(0, int(raw))
    except ValueError:
        return 0
