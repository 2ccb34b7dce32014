"""The sequence batcher: stateful models, whose requests belong to sequences (`sequence_batching` in the config).

Triton's semantics, as far as they go here (docs/sequence-batching.md lists the differences):
- every request names its sequence (`sequence_id`, non-zero or non-empty), has batch size 1, and the first request
  of a sequence carries the START flag; the END flag closes it;
- a live sequence holds a slot of one instance, and all its requests run on that instance in arrival order, one
  per execution (sequence_slots.py): a python model keeps its state in that instance's process;
- the requests of an instance's slots are batched by the `direct` (the default) or the `oldest` strategy
  (sequence_strategy.py);
- sequences beyond the slots wait in a backlog (sequence_backlog.py), in arrival order, for a slot to free up (at
  END, at idle release after `max_sequence_idle_microseconds`, or when a queued request of the sequence is
  cancelled);
- a request's `timeout` applies to a sequence in the backlog only: once the earliest deadline of its queued
  requests passes, every request it has queued fails (UNAVAILABLE, Triton's "timeout of the corresponding sequence
  has been expired") and the sequence is forgotten, so its later requests fail for want of START; a request's
  priority is not looked at (Triton's sequence batcher ignores it too);
- control inputs (START, END, READY, CORRID) and implicit state (`state[]`) are fed by the server
  (backends/sequence.py `SequenceFeed`);
- `oldest.preserve_ordering`: answers leave in the order their requests arrived, across sequences
  (sequence_ordering.py);
- `iterative_sequence`: a request without a sequence id is a sequence of its own (an id from a counter of the
  batcher's, START), and a request its model hands back (a python model's `set_release_flags(RESCHEDULE)`) runs
  again in its slot, its flags cleared and its state kept, until the model releases it for good, which ends that
  sequence (Triton's GenerativeSequencer).

This module composes those pieces: a request's way in, idle release, each instance's dispatcher (held by Triton's
test hooks, TRITONSERVER_DELAY_SCHEDULER and _BACKLOG_DELAY_SCHEDULER: sequence_strategy.py), execution.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from modelhost.backends.api import Arrays, Job, JobOutcomes, Rescheduled
from modelhost.backends.sequence import (
    SEQUENCE_END,
    SEQUENCE_START,
    CorrelationId,
    SequenceFeed,
    batch_size_error,
    correlation_id_error,
    sequence_params,
    start_error,
)
from modelhost.engine.scheduling.instances import InstancePool, Worker
from modelhost.engine.scheduling.sequence_backlog import Backlog
from modelhost.engine.scheduling.sequence_ordering import OrderedDelivery, OrderedSink
from modelhost.engine.scheduling.sequence_slots import Lane, Sequence, SequenceRequest, SequenceSlots
from modelhost.engine.scheduling.sequence_strategy import SequenceStrategy
from modelhost.errors import Cancelled, InternalError, InvalidArgument, ModelConfigError, Unavailable
from modelhost.observability.stats import ModelStats
from modelhost.types import InferenceRequest

log = logging.getLogger("modelhost.sequence_batcher")

# Triton's words (core sequence_batch_scheduler.cc, sequencer); those of a request that breaks the sequence
# contract are backends/sequence.py's.
_CANCELLED = "sequence {} of model '{}' was cancelled: a request of it went away while queued"
_UNLOADED = "model '{}' was unloaded while the request waited in its sequence batcher"
_EXPIRED = "timeout of the corresponding sequence has been expired"  # Triton's words


class SequenceBatcher:
    __slots__ = (
        "_closed",
        "_iterative_ids",
        "_live",
        "_reaper",
        "backlog",
        "feed",
        "idle_ns",
        "iterative",
        "name",
        "ordered",
        "pool",
        "slots",
        "stats",
        "strategy",
    )

    def __init__(self, pool: InstancePool, config: Any, stats: ModelStats, model_dir: Path) -> None:
        sb = config.sequence_batching
        self.pool = pool
        self.stats = stats
        self.name = str(config.name)
        self.strategy = SequenceStrategy(config, pool.request_level)
        # Normalisation sets the 1 s default; a config built in a test may not have run it.
        self.idle_ns = (int(sb.max_sequence_idle_microseconds) or 1_000_000) * 1000
        self.feed = SequenceFeed(config, model_dir)
        if self.feed.states and pool.request_level:
            # A python model answers only the outputs its config lists: the state output would never come back.
            raise ModelConfigError(
                f"implicit state (sequence_batching.state) is not supported for python model '{self.name}'; "
                "keep the state in the model, keyed by request.correlation_id()"
            )
        self.slots = SequenceSlots(pool.workers, self.strategy.per_lane)
        self.backlog = Backlog()
        self._live: dict[CorrelationId, Sequence] = {}  # sequences that take more requests
        self._reaper: asyncio.Task[None] | None = None
        self._closed = False
        self.iterative = bool(sb.iterative_sequence)
        # Answers in arrival order across sequences (Triton's oldest.preserve_ordering).
        preserve = self.strategy.oldest and bool(sb.oldest.preserve_ordering)
        self.ordered = OrderedDelivery() if preserve else None
        self._iterative_ids = itertools.count(1)  # as Triton's: shown to the model, never looked up

    # -- queueing --------------------------------------------------------------------------------------------------

    def queued(self) -> int:
        """Requests waiting, in slots or in the backlog."""
        return self.slots.requests + self.backlog.requests

    def continues(self, request: InferenceRequest) -> bool:
        """Whether the request is a later request of a live sequence (served while the server drains)."""
        corrid, flags = sequence_params(request)
        return not flags & SEQUENCE_START and corrid in self._live

    def live_sequences(self) -> int:
        """Sequences holding a slot or waiting in the backlog (freed ones are gone: a leak shows here)."""
        return self.slots.held() + len(self.backlog)

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
        ordered: OrderedSink | None = None
        if self.ordered is not None and job.sink is not None:  # a decoupled model's request: responses held
            ordered = job.sink = self.ordered.sink(job.sink)
        request = SequenceRequest(job, flags, asyncio.get_running_loop().create_future(), now, sequence)
        sequence.queue.append(request)
        if self.ordered is not None:
            self.ordered.enlist(request)
        sequence.last_ns = now
        if flags & SEQUENCE_END:
            sequence.closing = True
            del self._live[corrid]
        if sequence.lane is None:
            self.backlog.requests += 1
            if timeout_us > 0:
                self.backlog.shorten(sequence, now + timeout_us * 1000)
        else:
            self.slots.requests += 1
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

    def _new_sequence(self, corrid: CorrelationId, listed: bool = True) -> Sequence:
        sequence = Sequence(corrid)
        if listed:  # found by its id by its later requests
            self._live[corrid] = sequence
        lane = self.slots.take(sequence)
        if lane is not None:
            self._serve(lane)
        else:
            self.backlog.append(sequence)
        return sequence

    def _serve(self, lane: Lane) -> None:
        """A sequence took a slot of `lane`: its dispatcher and the idle reaper run."""
        if lane.task is None or lane.task.done():
            lane.task = asyncio.get_running_loop().create_task(self._run_lane(lane))
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap())

    def _wake(self, lane: Lane | None) -> None:
        if self.strategy.hooked:
            for each in self.slots.lanes.values():  # every lane is held by the test hooks' global counts
                each.arrived.set()
        elif lane is not None:
            lane.arrived.set()

    def _unqueue(self, request: SequenceRequest) -> None:
        request.taken = True
        if request.sequence.lane is None:
            self.backlog.requests -= 1
        else:
            self.slots.requests -= 1

    def _abandon(self, request: SequenceRequest) -> None:
        """A queued request's caller went away: the sequence is cancelled (as Triton cancels it), its other
        queued requests fail, and its slot goes to the next sequence."""
        sequence = request.sequence
        sequence.queue.remove(request)
        self._unqueue(request)
        self._cancel(sequence, Cancelled(_CANCELLED.format(sequence.corrid, self.name)))

    def _cancel(self, sequence: Sequence, error: BaseException) -> None:
        while sequence.queue:
            other = sequence.queue.popleft()
            self._unqueue(other)
            if not other.future.done():
                other.future.set_exception(error)
        self._close_sequence(sequence)
        self._maybe_release(sequence)

    def _close_sequence(self, sequence: Sequence) -> None:
        sequence.closing = True
        if self._live.get(sequence.corrid) is sequence:
            del self._live[sequence.corrid]

    def _maybe_release(self, sequence: Sequence) -> None:
        """Free the sequence's slot (or backlog place) once it is closed and nothing of it is queued or running."""
        if not sequence.closing or sequence.queue or sequence.running:
            return
        sequence.state = {}
        if sequence.lane is None:
            self.backlog.remove(sequence)
            return
        lane = self.slots.vacate(sequence)
        if lane is not None:  # else already released
            self._give_slot(lane, sequence.slot)

    def _give_slot(self, lane: Lane, slot: int) -> None:
        """The freed slot goes to the oldest backlogged sequence, with the requests it collected meanwhile."""
        if lane.emptied is not None:  # a retired instance's: its last sequences end, nothing new comes
            self.slots.drop_if_empty(lane)
            return
        waiting = self.backlog.pop() if self.backlog.sequences else None
        if waiting is None:
            self.slots.free(lane, slot)
            return
        self.slots.requests += len(waiting.queue)
        self.slots.assign(waiting, lane, slot)
        self._serve(lane)
        self._wake(lane)

    # -- instance updates ---------------------------------------------------------------------------------------

    def add_lanes(self, workers: list[Worker]) -> None:
        """New instances (an instance update): their slots take backlogged sequences first, then new ones."""
        for worker in workers:
            lane = self.slots.add(worker)
            for slot in range(self.slots.per_lane):
                self._give_slot(lane, slot)

    def sequences_on(self, worker: Worker) -> int:
        """Sequences holding a slot of that instance."""
        return self.slots.sequences_on(worker)

    def retire_lane(self, worker: Worker) -> asyncio.Future[None]:
        """An instance leaves (an instance update): its slots take no new sequence, and the sequences in them go
        on there until they end (as Triton keeps a removed instance for them). Resolves once none is left."""
        return self.slots.retire(worker)

    # -- idle release ------------------------------------------------------------------------------------------

    async def _reap(self) -> None:
        """Release the slots of sequences that sent nothing for max_sequence_idle_microseconds, and expire the
        backlogged sequences whose deadline passed."""
        while True:
            now = time.perf_counter_ns()
            idle, wait_ns, held = self.slots.idle(now, self.idle_ns)
            for sequence in idle:
                self._close_sequence(sequence)
                self._maybe_release(sequence)
            if self.backlog.sequences:
                expired, next_ns = self.backlog.expired(now)
                for sequence in expired:
                    self._cancel(sequence, Unavailable(_EXPIRED))
                if next_ns is not None:
                    wait_ns = min(wait_ns, next_ns)
            if not held:
                return
            await _wait(self.backlog.deadline_changed, wait_ns / 1e9)

    # -- batch forming ----------------------------------------------------------------------------------------

    async def _next_batch(self, lane: Lane) -> list[SequenceRequest]:
        while True:
            if self.strategy.hooked and self.strategy.held(self.slots.requests, self.backlog.requests):
                await _wait(lane.arrived, None)
                continue
            batch = self.strategy.choose(lane, force=False)
            if batch is None:
                oldest = min(r.enqueued_ns for r in self.strategy.heads(lane))
                remaining = (oldest + self.strategy.delay_ns - time.perf_counter_ns()) / 1e9
                if remaining > 0:
                    await _wait(lane.arrived, remaining)
                    continue
                batch = self.strategy.choose(lane, force=True)
            if batch:
                return batch
            await _wait(lane.arrived, None)

    async def _run_lane(self, lane: Lane) -> None:
        """This instance's dispatcher: one execution at a time, so a sequence's requests run in order."""
        strategy = self.strategy
        while any(s is not None for s in lane.slots):
            if not strategy.heads(lane) or (
                strategy.hooked and strategy.held(self.slots.requests, self.backlog.requests)
            ):
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

    def _launch(self, worker: Worker, batch: list[SequenceRequest], lane: Lane) -> None:
        started = time.perf_counter_ns()
        runnable: list[SequenceRequest] = []
        fed: list[Arrays] = []
        for request in batch:
            sequence = request.sequence
            sequence.queue.popleft()
            self._unqueue(request)
            sequence.running += 1
            request.job.timing.queue_ns = started - request.enqueued_ns
            if request.flags & SEQUENCE_START or not sequence.state:  # its state starts from the initial one
                sequence.state = {s.input_name: s.initial for s in self.feed.states}
            try:
                # The request's inputs with the control and state tensors the server feeds.
                fed.append(self.feed.inputs(request.job.inputs, sequence.corrid, request.flags, sequence.state))
            except InvalidArgument as e:
                self._done(request, e)
                continue
            runnable.append(request)
        if not runnable:
            self.pool.release(worker)
            return
        rows, size = self.strategy.rows(runnable, lane)
        by_row = dict(zip(rows, fed, strict=True))
        null = self.feed.null_row(fed[0]) if size > len(rows) else {}
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
        wanted = {n for r in runnable for n in r.job.output_names} | {s.output_name for s in self.feed.states}
        job = Job(inputs, sorted(wanted), len(all_rows))
        input_ns = time.perf_counter_ns() - started
        result: asyncio.Future[Arrays] = asyncio.get_running_loop().create_future()
        result.add_done_callback(lambda f: self._complete(runnable, rows, job, f, input_ns))
        self.pool.start(worker, job, result)

    def _complete(
        self,
        batch: list[SequenceRequest],
        rows: list[int],
        job: Job,
        result: asyncio.Future[Arrays],
        input_ns: int,
    ) -> None:
        started = time.perf_counter_ns()
        error = result.exception()
        answers: list[Arrays | BaseException] = []
        if error is not None:
            answers = [error] * len(batch)
        elif job.batch_size == 1:  # whole outputs: a model without batching has no rows to slice
            outputs = result.result()
            self.feed.keep_state(batch[0].sequence.state, outputs, None)
            answers.append({n: outputs[n] for n in batch[0].job.output_names})
        else:
            outputs = result.result()
            for row, request in zip(rows, batch, strict=True):
                self.feed.keep_state(request.sequence.state, outputs, row)
                answers.append({n: outputs[n][row : row + 1] for n in request.job.output_names})
        output_ns = time.perf_counter_ns() - started
        # As Triton: the execution's batch size counts the padding rows, the inference count the requests.
        self.stats.executed(job.batch_size, input_ns, job.timing.infer_ns, output_ns, inferences=len(batch))
        for request, answer in zip(batch, answers, strict=True):
            request.job.timing.input_ns += input_ns
            request.job.timing.infer_ns = job.timing.infer_ns
            self._done(request, answer)

    def _complete_requests(
        self,
        batch: list[SequenceRequest],
        rows: list[int],
        size: int,
        result: asyncio.Future[JobOutcomes],
        input_ns: int,
    ) -> None:
        outcomes = result.result()
        self.stats.executed(size, input_ns, batch[0].job.timing.infer_ns, 0, inferences=len(batch))
        for request, row in zip(batch, rows, strict=True):
            self._done(request, outcomes[row])  # the padding rows' answers are dropped

    def _done(self, request: SequenceRequest, answer: Arrays | BaseException) -> None:
        sequence = request.sequence
        sequence.running -= 1
        sequence.last_ns = time.perf_counter_ns()
        if isinstance(answer, Rescheduled) and not request.future.done() and not self._closed:
            self._run_again(request)
            return
        if self.ordered is not None:
            self.ordered.deliver(request, answer)
        else:
            request.resolve(answer)
        if sequence.queue and sequence.lane is not None:
            self._wake(sequence.lane)  # its next request may go now
        self._maybe_release(sequence)

    def _run_again(self, request: SequenceRequest) -> None:
        """A request its model handed back: queued again in its sequence, neither START nor END (Triton)."""
        sequence = request.sequence
        request.flags = 0
        request.job.sequence = (sequence.corrid, 0)
        request.taken = False
        request.enqueued_ns = sequence.last_ns
        sequence.queue.append(request)
        if sequence.lane is None:
            self.backlog.requests += 1
        else:
            self.slots.requests += 1
        self._wake(sequence.lane)

    # -- unload ------------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Unload: every queued request fails, every slot and state is freed, the tasks stop."""
        self._closed = True
        error = Unavailable(_UNLOADED.format(self.name))
        # The backlog first, so that no freed slot is handed to a backlogged sequence on the way out.
        for sequence in self.backlog.waiting() + self.slots.occupied():
            self._cancel(sequence, error)
        self.slots.close()
        self.backlog.clear()
        self._live.clear()
        if self._reaper is not None:
            self._reaper.cancel()


async def _wait(event: asyncio.Event, timeout: float | None) -> None:
    event.clear()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout)
