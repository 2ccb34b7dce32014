"""The sequence batcher: stateful models, whose requests belong to sequences (`sequence_batching` in the config).

Triton's semantics, as far as they go here (docs/sequence-batching.md lists the differences):
- every request names its sequence (`sequence_id`, non-zero or non-empty), has batch size 1, and the first request
  of a sequence carries the START flag; the END flag closes it;
- a live sequence holds a slot of one instance, and all its requests run on that instance in arrival order, one
  per execution: a python model keeps its state in that instance's process;
- `direct` (the default): slots per instance = max_batch_size (1 without batching); the present requests of the
  slots of one instance run together, waiting up to `direct.max_queue_delay_microseconds` for the other occupied
  slots; `oldest`: `max_candidate_sequences` slots per instance, batched oldest first up to max_batch_size, a
  preferred size going at once, otherwise waiting up to `oldest.max_queue_delay_microseconds`;
- sequences beyond the slots wait in a backlog, in arrival order, for a slot to free up (at END, at idle release
  after `max_sequence_idle_microseconds`, or when a queued request of the sequence is cancelled);
- a request's `timeout` applies to a sequence in the backlog only: once the earliest deadline of its queued
  requests passes, every request it has queued fails (UNAVAILABLE, Triton's "timeout of the corresponding sequence
  has been expired") and the sequence is forgotten, so its later requests fail for want of START; a request's
  priority is not looked at (Triton's sequence batcher ignores it too);
- control inputs (START, END, READY, CORRID) and implicit state (`state[]`) are fed by the server;
- `oldest.preserve_ordering`: answers leave in the order their requests arrived, across sequences (an answer
  waits for those of earlier requests; a decoupled model's responses to a request wait until every earlier
  request has had its final one);
- `iterative_sequence`: a request without a sequence id is a sequence of its own (an id from a counter of the
  batcher's, START), and a request its model hands back (a python model's `set_release_flags(RESCHEDULE)`) runs
  again in its slot, its flags cleared and its state kept, until the model releases it for good, which ends that
  sequence (Triton's GenerativeSequencer).

Test hooks, as Triton's: `TRITONSERVER_DELAY_SCHEDULER=N` holds every execution until N requests are queued in
slots, `TRITONSERVER_BACKLOG_DELAY_SCHEDULER=M` until M requests wait in the backlog (Triton reads the latter only
with the former set; here either works alone).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from tritonclient.grpc.model_config_pb2 import ModelSequenceBatching

from modelhost.backends.api import Arrays, Job, JobOutcomes, Rescheduled, ResponseSink
from modelhost.backends.sequence import (
    SEQUENCE_END,
    SEQUENCE_START,
    Control,
    CorrelationId,
    controls,
    sequence_params,
    states,
)
from modelhost.engine.scheduling.dynamic_batcher import batch_key
from modelhost.engine.scheduling.instances import InstancePool, Worker
from modelhost.errors import Cancelled, InternalError, InvalidArgument, ModelConfigError, Unavailable
from modelhost.observability.stats import ModelStats
from modelhost.types import InferenceRequest

log = logging.getLogger("modelhost.sequence_batcher")

_Kind = ModelSequenceBatching.Control

# -- Triton's messages (core sequence_batch_scheduler.cc, sequencer), in one place -------------------------------


def batch_size_error(model: str) -> InvalidArgument:
    return InvalidArgument(
        f"inference request to model '{model}' must specify batch-size 1 due to requirements of sequence batcher"
    )


def correlation_id_error(model: str) -> InvalidArgument:
    return InvalidArgument(
        f"inference request to model '{model}' must specify a non-zero or non-empty correlation ID"
    )


def start_error(corrid: CorrelationId, model: str) -> InvalidArgument:
    return InvalidArgument(
        f"inference request for sequence {corrid} to model '{model}' must specify the START flag on the first "
        "request of the sequence"
    )


_CANCELLED = "sequence {} of model '{}' was cancelled: a request of it went away while queued"
_UNLOADED = "model '{}' was unloaded while the request waited in its sequence batcher"
_EXPIRED = "timeout of the corresponding sequence has been expired"  # Triton's words


# -- bookkeeping -------------------------------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Request:
    job: Job
    flags: int
    future: asyncio.Future[Arrays]
    enqueued_ns: int
    sequence: _Sequence
    taken: bool = False  # in an execution, answered, or dropped
    # oldest.preserve_ordering: its answer, held until every request that arrived before it has its own.
    answer: Arrays | BaseException | None = None


@dataclass(eq=False, slots=True)
class _Sequence:
    corrid: CorrelationId
    queue: collections.deque[_Request] = field(default_factory=collections.deque)
    lane: _Lane | None = None  # None: waiting in the backlog
    slot: int = 0
    state: Arrays = field(default_factory=dict)
    last_ns: int = 0
    running: int = 0
    closing: bool = False  # END queued, released or cancelled: no request joins it any more
    # In the backlog: when the earliest timeout of its queued requests passes (perf_counter_ns; 0: none).
    expires_ns: int = 0


@dataclass(eq=False, slots=True)
class _Lane:
    """One instance and its slots."""

    index: int
    worker: Worker
    slots: list[_Sequence | None]
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    # Retired by an instance update: its slots take no new sequence; resolved once the last one ends.
    emptied: asyncio.Future[None] | None = None


class SequenceBatcher:
    def __init__(self, pool: InstancePool, config: Any, stats: ModelStats, model_dir: Path) -> None:
        sb = config.sequence_batching
        self.pool = pool
        self.stats = stats
        self.name = str(config.name)
        self.batching = int(config.max_batch_size) > 0
        self.max_rows = max(1, int(config.max_batch_size))
        self.oldest = sb.HasField("oldest")
        if self.oldest:
            slots = max(1, int(sb.oldest.max_candidate_sequences) or self.max_rows)
            self.delay_ns = int(sb.oldest.max_queue_delay_microseconds) * 1000
            self.preferred = {int(p) for p in sb.oldest.preferred_batch_size if 0 < p <= self.max_rows}
            self.min_utilization = 0.0
        else:
            slots = self.max_rows
            self.delay_ns = int(sb.direct.max_queue_delay_microseconds) * 1000
            self.preferred = set()
            self.min_utilization = float(sb.direct.minimum_slot_utilization)
        # Normalisation sets the 1 s default; a config built in a test may not have run it.
        self.idle_ns = (int(sb.max_sequence_idle_microseconds) or 1_000_000) * 1000
        self.controls = controls(config)
        self.states = states(config, model_dir)
        if self.states and pool.request_level:
            # A python model answers only the outputs its config lists: the state output would never come back.
            raise ModelConfigError(
                f"implicit state (sequence_batching.state) is not supported for python model '{self.name}'; "
                "keep the state in the model, keyed by request.correlation_id()"
            )
        self._slots_per_lane = slots
        self._next_lane = len(pool.workers) - 1  # the last lane index handed out
        self._lanes: dict[int, _Lane] = {i: _Lane(i, w, [None] * slots) for i, w in enumerate(pool.workers)}
        # Free slots, spread over the instances first (slot 0 of each instance, then slot 1, ...).
        self._free: list[tuple[int, int]] = sorted(
            ((s, lane.index) for lane in self._lanes.values() for s in range(slots)), reverse=True
        )
        self._live: dict[CorrelationId, _Sequence] = {}  # sequences that take more requests
        self._backlog: collections.deque[_Sequence] = collections.deque()
        self._in_slots = 0  # requests queued in slots
        self._in_backlog = 0  # requests queued in the backlog
        self._reaper: asyncio.Task[None] | None = None
        self._reaper_wake = asyncio.Event()  # a backlogged sequence's deadline came sooner
        self._delay_n = _env_count("TRITONSERVER_DELAY_SCHEDULER")
        self._backlog_delay_n = _env_count("TRITONSERVER_BACKLOG_DELAY_SCHEDULER")
        self._closed = False
        self.iterative = bool(sb.iterative_sequence)
        # Answers in arrival order across sequences (Triton's oldest.preserve_ordering): held in `_in_order`.
        self.preserve_ordering = self.oldest and bool(sb.oldest.preserve_ordering)
        self._in_order: collections.deque[_Request] = collections.deque()
        self._streams_in_order: collections.deque[_OrderedSink] = collections.deque()  # decoupled requests'
        self._iterative_ids = itertools.count(1)  # as Triton's: shown to the model, never looked up

    # -- queueing --------------------------------------------------------------------------------------------------

    def queued(self) -> int:
        """Requests waiting, in slots or in the backlog."""
        return self._in_slots + self._in_backlog

    def continues(self, request: InferenceRequest) -> bool:
        """Whether the request is a later request of a live sequence (served while the server drains)."""
        corrid, flags = sequence_params(request)
        return not flags & SEQUENCE_START and corrid in self._live

    def live_sequences(self) -> int:
        """Sequences holding a slot or waiting in the backlog (freed ones are gone: a leak shows here)."""
        held = sum(1 for lane in self._lanes.values() for s in lane.slots if s is not None)
        return held + len(self._backlog)

    async def execute(self, job: Job, priority: int = 0, timeout_us: int = 0) -> Arrays:
        if self._closed:
            raise Unavailable(_UNLOADED.format(self.name))
        if job.batch_size > 1:
            raise batch_size_error(self.name)
        corrid, flags = sequence_params(job.request)
        own = self.iterative and (corrid == 0 or corrid == "")
        if own:  # a sequence of its own, which ends when the model releases the request for good
            corrid, flags = next(self._iterative_ids), SEQUENCE_START
            job.sequence = (corrid, flags)
        elif corrid == 0 or corrid == "":
            raise correlation_id_error(self.name)
        sequence = None if own else self._live.get(corrid)
        if sequence is None:
            if not flags & SEQUENCE_START:
                raise start_error(corrid, self.name)
            sequence = self._new_sequence(corrid, listed=not own)
            sequence.closing = own  # nothing joins it; its slot is freed once its one request is done
        # A START on a live sequence (its END never came) goes on in the same slot, its state reset (Triton).
        now = time.perf_counter_ns()
        ordered: _OrderedSink | None = None
        if self.preserve_ordering and job.sink is not None:  # a decoupled model's request: its responses held
            ordered = job.sink = _OrderedSink(job.sink, self._streams_in_order)
        request = _Request(job, flags, asyncio.get_running_loop().create_future(), now, sequence)
        sequence.queue.append(request)
        if self.preserve_ordering:
            self._in_order.append(request)
        sequence.last_ns = now
        if flags & SEQUENCE_END:
            sequence.closing = True
            del self._live[corrid]
        if sequence.lane is None:
            self._in_backlog += 1
            if timeout_us > 0:
                deadline = now + timeout_us * 1000
                if not sequence.expires_ns or deadline < sequence.expires_ns:
                    sequence.expires_ns = deadline
                    self._reaper_wake.set()
        else:
            self._in_slots += 1
        self._wake(sequence.lane)
        try:
            return await request.future
        except BaseException:
            if ordered is not None:  # failed: the engine says so at once, and the requests after it go on
                ordered.abandon()
            raise
        finally:
            if not request.taken:  # the caller went away while queued
                self._abandon(request)

    def _new_sequence(self, corrid: CorrelationId, listed: bool = True) -> _Sequence:
        sequence = _Sequence(corrid)
        if listed:  # found by its id by its later requests
            self._live[corrid] = sequence
        if self._free:
            slot, lane = self._free.pop()
            self._assign(sequence, self._lanes[lane], slot)
        else:
            self._backlog.append(sequence)
        return sequence

    def _assign(self, sequence: _Sequence, lane: _Lane, slot: int) -> None:
        sequence.lane, sequence.slot = lane, slot
        lane.slots[slot] = sequence
        if lane.task is None or lane.task.done():
            lane.task = asyncio.get_running_loop().create_task(self._run_lane(lane))
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap())

    def _wake(self, lane: _Lane | None) -> None:
        if self._delay_n or self._backlog_delay_n:
            for each in self._lanes.values():  # every lane is held by the test hooks' global counts
                each.arrived.set()
        elif lane is not None:
            lane.arrived.set()

    def _unqueue(self, request: _Request) -> None:
        request.taken = True
        if request.sequence.lane is None:
            self._in_backlog -= 1
        else:
            self._in_slots -= 1

    def _abandon(self, request: _Request) -> None:
        """A queued request's caller went away: the sequence is cancelled (as Triton cancels it), its other
        queued requests fail, and its slot goes to the next sequence."""
        sequence = request.sequence
        sequence.queue.remove(request)
        self._unqueue(request)
        self._cancel(sequence, Cancelled(_CANCELLED.format(sequence.corrid, self.name)))

    def _cancel(self, sequence: _Sequence, error: BaseException) -> None:
        while sequence.queue:
            other = sequence.queue.popleft()
            self._unqueue(other)
            if not other.future.done():
                other.future.set_exception(error)
        self._close_sequence(sequence)
        self._maybe_release(sequence)

    def _close_sequence(self, sequence: _Sequence) -> None:
        sequence.closing = True
        if self._live.get(sequence.corrid) is sequence:
            del self._live[sequence.corrid]

    def _maybe_release(self, sequence: _Sequence) -> None:
        """Free the sequence's slot (or backlog place) once it is closed and nothing of it is queued or running."""
        if not sequence.closing or sequence.queue or sequence.running:
            return
        sequence.state = {}
        lane = sequence.lane
        if lane is None:
            with contextlib.suppress(ValueError):
                self._backlog.remove(sequence)
            return
        if lane.slots[sequence.slot] is not sequence:
            return  # already released
        lane.slots[sequence.slot] = None
        self._give_slot(lane, sequence.slot)

    def _give_slot(self, lane: _Lane, slot: int) -> None:
        """The freed slot goes to the oldest backlogged sequence, with the requests it collected meanwhile."""
        if lane.emptied is not None:  # a retired instance's: its last sequences end, nothing new comes
            self._maybe_emptied(lane)
            return
        while self._backlog:
            waiting = self._backlog.popleft()
            if not waiting.queue:  # cancelled in the backlog
                continue
            self._in_backlog -= len(waiting.queue)
            self._in_slots += len(waiting.queue)
            waiting.expires_ns = 0  # in a slot, its requests wait without a deadline (Triton)
            self._assign(waiting, lane, slot)
            self._wake(lane)
            return
        self._free.append((slot, lane.index))
        self._free.sort(reverse=True)

    # -- instance updates ---------------------------------------------------------------------------------------

    def add_lanes(self, workers: list[Worker]) -> None:
        """New instances (an instance update): their slots take backlogged sequences first, then new ones."""
        for worker in workers:
            self._next_lane += 1
            index = self._next_lane
            lane = _Lane(index, worker, [None] * self._slots_per_lane)
            self._lanes[index] = lane
            for slot in range(self._slots_per_lane):
                self._give_slot(lane, slot)

    def sequences_on(self, worker: Worker) -> int:
        """Sequences holding a slot of that instance."""
        return sum(
            1 for lane in self._lanes.values() if lane.worker is worker for s in lane.slots if s is not None
        )

    def retire_lane(self, worker: Worker) -> asyncio.Future[None]:
        """An instance leaves (an instance update): its slots take no new sequence, and the sequences in them go
        on there until they end (as Triton keeps a removed instance for them). Resolves once none is left."""
        lane = next(lane for lane in self._lanes.values() if lane.worker is worker)
        lane.emptied = asyncio.get_running_loop().create_future()
        self._free = [(slot, index) for slot, index in self._free if index != lane.index]
        self._maybe_emptied(lane)
        return lane.emptied

    def _maybe_emptied(self, lane: _Lane) -> None:
        if lane.emptied is None or any(s is not None for s in lane.slots):
            return
        del self._lanes[lane.index]
        lane.arrived.set()  # its dispatcher sees no sequence and ends
        if not lane.emptied.done():
            lane.emptied.set_result(None)

    # -- idle release ------------------------------------------------------------------------------------------

    async def _reap(self) -> None:
        """Release the slots of sequences that sent nothing for max_sequence_idle_microseconds."""
        while True:
            now = time.perf_counter_ns()
            wait_ns = self.idle_ns
            held = False
            for lane in list(self._lanes.values()):
                for sequence in lane.slots:
                    if sequence is None or sequence.closing:
                        continue
                    held = True
                    if sequence.queue or sequence.running:
                        continue  # looked at again once idle: its last_ns moves at completion
                    remaining = sequence.last_ns + self.idle_ns - now
                    if remaining <= 0:
                        self._close_sequence(sequence)
                        self._maybe_release(sequence)
                    else:
                        wait_ns = min(wait_ns, remaining)
            for sequence in list(self._backlog):
                if not sequence.expires_ns:
                    continue
                if sequence.expires_ns <= now:
                    self._cancel(sequence, Unavailable(_EXPIRED))
                else:
                    wait_ns = min(wait_ns, sequence.expires_ns - now)
            if not held:
                return
            await _wait(self._reaper_wake, wait_ns / 1e9)

    # -- batch forming ----------------------------------------------------------------------------------------

    def _held_by_hooks(self) -> bool:
        if (self._delay_n and self._in_slots < self._delay_n) or (
            self._backlog_delay_n and self._in_backlog < self._backlog_delay_n
        ):
            return True
        self._delay_n = self._backlog_delay_n = 0  # once reached, the hooks are spent (as Triton's)
        return False

    @staticmethod
    def _heads(lane: _Lane) -> list[_Request]:
        """The next request of each sequence in the lane's slots whose previous request has completed: the
        instance is released before the completion callback runs, and the next request must read the state that
        its predecessor wrote (a backlogged sequence's requests, or a stream's, queue up back to back)."""
        return [s.queue[0] for s in lane.slots if s is not None and s.queue and not s.running]

    def _choose(self, lane: _Lane, force: bool) -> list[_Request] | None:
        """The requests to run now, at most one per sequence, or None to wait for more."""
        heads = self._heads(lane)
        if not heads:
            return []
        heads.sort(key=lambda r: r.enqueued_ns)
        if len(heads) > 1 and not self.pool.request_level:
            # Rows are concatenated: only requests whose inputs (and states, which may grow step by step) have
            # the oldest one's shapes go together.
            key = self._shapes(heads[0])
            heads = [r for r in heads if self._shapes(r) == key]
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

    @staticmethod
    def _shapes(request: _Request) -> tuple[Any, ...]:
        state = request.sequence.state
        return (batch_key(request.job.inputs), *((name, state[name].shape) for name in sorted(state)))

    async def _next_batch(self, lane: _Lane) -> list[_Request]:
        while True:
            if self._held_by_hooks():
                await _wait(lane.arrived, None)
                continue
            batch = self._choose(lane, force=False)
            if batch is None:
                oldest = min(r.enqueued_ns for r in self._heads(lane))
                remaining = (oldest + self.delay_ns - time.perf_counter_ns()) / 1e9
                if remaining > 0:
                    await _wait(lane.arrived, remaining)
                    continue
                batch = self._choose(lane, force=True)
            if batch:
                return batch
            await _wait(lane.arrived, None)

    async def _run_lane(self, lane: _Lane) -> None:
        """This instance's dispatcher: one execution at a time, so a sequence's requests run in order."""
        while any(s is not None for s in lane.slots):
            if not self._heads(lane) or self._held_by_hooks():
                await _wait(lane.arrived, None)
                continue
            worker = await self.pool.acquire_worker(lane.worker)
            try:
                batch = await self._next_batch(lane)
            except BaseException:
                self.pool.release(worker)
                raise
            try:
                self._launch(worker, batch, lane)
            except Exception as e:  # a fault here must not leave the lane's sequences waiting forever
                log.exception("sequence batcher of '%s' failed to start a batch", self.name)
                self.pool.release(worker)
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(InternalError(f"failed to start the batch: {e}"))

    # -- execution ---------------------------------------------------------------------------------------------

    def _fed(self, request: _Request) -> Arrays:
        """The request's inputs with the control and state tensors the server feeds."""
        job = request.job
        sequence = request.sequence
        if request.flags & SEQUENCE_START or not sequence.state:
            sequence.state = {s.input_name: s.initial for s in self.states}
        inputs = dict(job.inputs)
        shape = [1, 1] if self.batching else [1]
        for control in self.controls:
            inputs[control.name] = self._control_value(control, request, shape)
        inputs.update(sequence.state)
        return inputs

    def _control_value(self, control: Control, request: _Request, shape: list[int]) -> npt.NDArray[Any]:
        kind = control.kind
        if kind == _Kind.CONTROL_SEQUENCE_CORRID:
            corrid = request.sequence.corrid
            if control.dtype == np.object_:
                return np.full(shape, str(corrid).encode(), dtype=object)
            if isinstance(corrid, str):
                raise InvalidArgument(
                    f"sequence batching control '{control.name}' of model '{self.name}' expects a numeric "
                    f"correlation ID, got '{corrid}'"
                )
            info = np.iinfo(control.dtype) if control.dtype.kind in "iu" else None
            if info is not None and not info.min <= corrid <= info.max:
                raise InvalidArgument(
                    f"sequence batching control '{control.name}' of model '{self.name}' is of type "
                    f"{control.dtype}, which cannot hold correlation ID {corrid}"
                )
            return np.full(shape, corrid, dtype=control.dtype)
        if kind == _Kind.CONTROL_SEQUENCE_START:
            on = bool(request.flags & SEQUENCE_START)
        elif kind == _Kind.CONTROL_SEQUENCE_END:
            on = bool(request.flags & SEQUENCE_END)
        else:  # READY: every row sent holds a request (empty slots are left out, not padded)
            on = True
        return np.full(shape, control.false_true[1 if on else 0], dtype=control.dtype)

    def _null_row(self, like: Arrays) -> Arrays:
        """A padding row for an empty slot, as Triton's null request: the data inputs zeros of a real row's
        shapes, READY (and START, END) false, CORRID 0, the states their initial values."""
        row: Arrays = {}
        for name, array in like.items():
            row[name] = np.full_like(array, b"") if array.dtype == np.object_ else np.zeros_like(array)
        shape = [1, 1] if self.batching else [1]
        for control in self.controls:
            if control.kind == _Kind.CONTROL_SEQUENCE_CORRID:
                row[control.name] = np.full(
                    shape, b"" if control.dtype == np.object_ else 0, dtype=control.dtype
                )
            else:
                row[control.name] = np.full(shape, control.false_true[0], dtype=control.dtype)
        for state in self.states:
            row[state.input_name] = state.initial
        return row

    def _rows(self, runnable: list[_Request]) -> list[int]:
        """The row of each request: its slot's index with the direct strategy (Triton pads the empty slots
        below the highest one used with null rows, so that a model keeping state per slot finds each sequence
        at its slot's row), else its place in the batch."""
        if self.oldest or not self.batching:
            return list(range(len(runnable)))
        return [r.sequence.slot for r in runnable]

    def _launch(self, worker: Worker, batch: list[_Request], lane: _Lane) -> None:
        started = time.perf_counter_ns()
        runnable: list[_Request] = []
        fed: list[Arrays] = []
        for request in batch:
            request.sequence.queue.popleft()
            self._unqueue(request)
            request.sequence.running += 1
            request.job.timing.queue_ns = started - request.enqueued_ns
            try:
                fed.append(self._fed(request))
            except InvalidArgument as e:
                self._done(request, e)
                continue
            runnable.append(request)
        if not runnable:
            self.pool.release(worker)
            return
        rows = self._rows(runnable)
        by_row = dict(zip(rows, fed, strict=True))
        size = max(rows) + 1
        if self.batching and not self.oldest:
            # Triton's direct strategy pads up to the highest slot holding a sequence, whether or not that
            # sequence has a request in this batch (waiting for its next one, or of another shape).
            size = max(size, max(i for i, s in enumerate(lane.slots) if s is not None) + 1)
        null = self._null_row(fed[0]) if size > len(rows) else {}
        all_rows = [by_row.get(i, null) for i in range(size)]
        if self.pool.request_level:
            for request, inputs in zip(runnable, fed, strict=True):
                request.job.inputs = inputs  # the model gets its controls; the caller no longer reads them
            jobs = {row: r.job for row, r in zip(rows, runnable, strict=True)}
            padded = [jobs[i] if i in jobs else Job(dict(null), [], 1) for i in range(size)]
            input_ns = time.perf_counter_ns() - started
            outcomes: asyncio.Future[JobOutcomes] = asyncio.get_running_loop().create_future()
            outcomes.add_done_callback(
                lambda f: self._complete_requests(runnable, rows, len(padded), f, input_ns)
            )
            self.pool.start_jobs(worker, padded, outcomes)
            return
        names = fed[0].keys()
        inputs = (
            fed[0] if len(all_rows) == 1 else {n: np.concatenate([row[n] for row in all_rows]) for n in names}
        )
        wanted = {n for r in runnable for n in r.job.output_names} | {s.output_name for s in self.states}
        job = Job(inputs, sorted(wanted), len(all_rows))
        input_ns = time.perf_counter_ns() - started
        result: asyncio.Future[Arrays] = asyncio.get_running_loop().create_future()
        result.add_done_callback(lambda f: self._complete(runnable, rows, job, f, input_ns))
        self.pool.start(worker, job, result)

    def _complete(
        self, batch: list[_Request], rows: list[int], job: Job, result: asyncio.Future[Arrays], input_ns: int
    ) -> None:
        started = time.perf_counter_ns()
        error = result.exception()
        answers: list[Arrays | BaseException] = []
        if error is not None:
            answers = [error] * len(batch)
        elif job.batch_size == 1:  # whole outputs: a model without batching has no rows to slice
            outputs = result.result()
            self._keep_state(batch[0].sequence, outputs, None)
            answers.append({n: outputs[n] for n in batch[0].job.output_names})
        else:
            outputs = result.result()
            for row, request in zip(rows, batch, strict=True):
                self._keep_state(request.sequence, outputs, row)
                answers.append({n: outputs[n][row : row + 1] for n in request.job.output_names})
        output_ns = time.perf_counter_ns() - started
        # As Triton: the execution's batch size counts the padding rows, the inference count the requests.
        self.stats.executed(job.batch_size, input_ns, job.timing.infer_ns, output_ns, inferences=len(batch))
        for request, answer in zip(batch, answers, strict=True):
            request.job.timing.input_ns += input_ns
            request.job.timing.infer_ns = job.timing.infer_ns
            self._done(request, answer)

    def _keep_state(self, sequence: _Sequence, outputs: Arrays, row: int | None) -> None:
        for state in self.states:
            value = outputs.get(state.output_name)
            if value is None:
                continue
            if row is None:
                # The model's output is the next input as it is: no copy, however large the state grows
                # (use_same_buffer_for_input_output, use_growable_memory).
                sequence.state[state.input_name] = np.asarray(value, dtype=state.initial.dtype)
            else:
                # A copy of the row: the batch's output buffer must not stay alive for one row of it.
                sequence.state[state.input_name] = np.array(value[row : row + 1], dtype=state.initial.dtype)

    def _complete_requests(
        self,
        batch: list[_Request],
        rows: list[int],
        size: int,
        result: asyncio.Future[JobOutcomes],
        input_ns: int,
    ) -> None:
        outcomes = result.result()
        self.stats.executed(size, input_ns, batch[0].job.timing.infer_ns, 0, inferences=len(batch))
        for request, row in zip(batch, rows, strict=True):
            self._done(request, outcomes[row])  # the padding rows' answers are dropped

    def _done(self, request: _Request, answer: Arrays | BaseException) -> None:
        sequence = request.sequence
        sequence.running -= 1
        sequence.last_ns = time.perf_counter_ns()
        if isinstance(answer, Rescheduled) and not request.future.done() and not self._closed:
            self._run_again(request)
            return
        if self.preserve_ordering:
            request.answer = answer
            self._answer_in_order()
        else:
            _answer(request, answer)
        if sequence.queue and sequence.lane is not None:
            self._wake(sequence.lane)  # its next request may go now
        self._maybe_release(sequence)

    def _answer_in_order(self) -> None:
        """Answer the requests at the front of the arrival order that have their answers (or were answered
        already: failed while queued, or gone)."""
        while self._in_order:
            first = self._in_order[0]
            if first.answer is None and not first.future.done():
                return
            self._in_order.popleft()
            if first.answer is not None:
                _answer(first, first.answer)

    def _run_again(self, request: _Request) -> None:
        """A request its model handed back: queued again in its sequence, neither START nor END (Triton)."""
        sequence = request.sequence
        request.flags = 0
        request.job.sequence = (sequence.corrid, 0)
        request.taken = False
        request.enqueued_ns = sequence.last_ns
        sequence.queue.append(request)
        if sequence.lane is None:
            self._in_backlog += 1
        else:
            self._in_slots += 1
        self._wake(sequence.lane)

    # -- unload ------------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Unload: every queued request fails, every slot and state is freed, the tasks stop."""
        self._closed = True
        error = Unavailable(_UNLOADED.format(self.name))
        # The backlog first, so that no freed slot is handed to a backlogged sequence on the way out.
        sequences = list(self._backlog) + [
            s for lane in self._lanes.values() for s in lane.slots if s is not None
        ]
        for sequence in sequences:
            self._cancel(sequence, error)
        for lane in self._lanes.values():
            lane.slots = [None] * len(lane.slots)
            if lane.task is not None:
                lane.task.cancel()
            if lane.emptied is not None and not lane.emptied.done():
                lane.emptied.set_result(None)
        self._backlog.clear()
        self._live.clear()
        if self._reaper is not None:
            self._reaper.cancel()


class _OrderedSink(ResponseSink):
    """oldest.preserve_ordering for a decoupled model: what the model sends for one request, passed on to the
    request's own sink once every request that arrived before it has sent its final response (held till then)."""

    def __init__(self, target: ResponseSink, order: collections.deque[_OrderedSink]) -> None:
        super().__init__()
        self.target = target
        self.order = order
        self.held: list[tuple[Arrays | None, BaseException | None, bool]] = []
        order.append(self)
        target.on_cancel = self._cancel_model  # the caller went away: the model hears of it, as without us

    def _cancel_model(self) -> None:
        if self.on_cancel is not None:
            self.on_cancel()

    def put(self, outputs: Arrays | None, error: BaseException | None = None, final: bool = False) -> None:
        if self.finished:
            return
        self.finished = final
        if self.order and self.order[0] is self:
            self.target.put(outputs, error, final)
            if final:
                self._next()
        else:
            self.held.append((outputs, error, final))

    def abandon(self) -> None:
        """The request failed without its final response: it holds back nobody any more."""
        self.finished = True
        self.held.clear()
        if self.order and self.order[0] is self:
            self._next()

    def _next(self) -> None:
        """This request is done: the next ones pass on what they hold, each done one making way for the next."""
        self.order.popleft()
        while self.order:
            front = self.order[0]
            for outputs, error, final in front.held:
                front.target.put(outputs, error, final)
            front.held.clear()
            if not front.finished:
                return
            self.order.popleft()


def _answer(request: _Request, answer: Arrays | BaseException) -> None:
    if request.future.done():  # the caller may have gone away while it ran
        return
    if isinstance(answer, BaseException):
        request.future.set_exception(answer)
    else:
        request.future.set_result(answer)


async def _wait(event: asyncio.Event, timeout: float | None) -> None:
    event.clear()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout)


def _env_count(name: str) -> int:
    """A test-hook count from the environment (Triton reads it with atoi: junk is 0, which disables it)."""
    raw = os.environ.get(name, "")
    try:
        return max(0, int(raw))
    except ValueError:
        return 0
