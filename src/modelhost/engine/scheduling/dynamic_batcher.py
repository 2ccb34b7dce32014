"""The dynamic batcher: requests of one model version queue here and run together, batched by rows.

Triton's semantics (`dynamic_batching` in the config):
- a batch is counted in rows (the first dimension), never more than `max_batch_size`;
- a batch is the run of requests at the head of the queue, in order, whose inputs have the same names (optional
  inputs), types and non-batch shapes: the first request that differs ends it, and the batch goes at once;
- with an instance free, the batcher sends the largest preferred batch size it can form at once; failing that,
  the requests that fit before the rows would pass the largest preferred size when the next would pass it, and a
  batch of at least the largest preferred size (one request may be larger); otherwise it waits for more requests
  until the oldest queued one has waited `max_queue_delay_microseconds`, and sends what it has then;
- `priority_levels` queues, 1 the highest; a request's `priority` 0 (or out of range) means the default level;
- queue policies per level: `max_queue_size` (full: "Exceeds maximum queue size" at once), timeouts with the
  REJECT or DELAY action, and the request's own `timeout` where `allow_timeout_override` lets it shorten them;
- `preserve_ordering`: answers are released in the order the requests arrived.

One dispatcher task per batcher takes an idle instance, forms a batch for it and starts it, then takes the next
idle instance: several instances drain one queue. A batch is one `np.concatenate` per input; each request gets
views of the outputs.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from modelhost.backends.api import Arrays, Job, JobOutcomes
from modelhost.engine.scheduling.instances import InstancePool, Worker
from modelhost.engine.scheduling.ragged import RaggedBatching
from modelhost.errors import InternalError, Rejected
from modelhost.observability.stats import ModelStats

_TIMEOUT_MESSAGE = "Request timeout expired"


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    reject_on_timeout: bool = True  # REJECT (True) or DELAY (False)
    default_timeout_ns: int = 0  # 0 = none
    allow_timeout_override: bool = False
    max_queue_size: int = 0  # 0 = unbounded

    @staticmethod
    def from_config(policy: Any) -> QueuePolicy:
        return QueuePolicy(
            reject_on_timeout=policy.timeout_action == 0,  # ModelQueuePolicy.REJECT
            default_timeout_ns=int(policy.default_timeout_microseconds) * 1000,
            allow_timeout_override=bool(policy.allow_timeout_override),
            max_queue_size=int(policy.max_queue_size),
        )

    def timeout_ns(self, requested_us: int) -> int:
        requested = requested_us * 1000
        # A request may only shorten the policy's timeout (or set one where the policy has none).
        shorter = self.default_timeout_ns == 0 or requested < self.default_timeout_ns
        if self.allow_timeout_override and requested > 0 and shorter:
            return requested
        return self.default_timeout_ns


@dataclass(eq=False, slots=True)
class Pending:
    job: Job
    key: tuple[Any, ...]
    level: int
    future: asyncio.Future[Arrays]
    enqueued_ns: int
    deadline_ns: int = 0
    expired: bool = False  # DELAY policy: timed out, served after everything else
    removed: bool = False  # taken into a batch, rejected, or abandoned by its caller
    timer: asyncio.TimerHandle | None = None


def batch_key(inputs: Arrays, ragged: frozenset[str] = frozenset()) -> tuple[Any, ...]:
    """Requests with equal keys can be concatenated along the batch dimension (the shape of an input that allows
    a ragged batch does not keep them apart)."""
    items = inputs.items() if len(inputs) == 1 else sorted(inputs.items())  # one input: nothing to sort
    return tuple((name, a.dtype.str, None if name in ragged else a.shape[1:]) for name, a in items)


@dataclass(slots=True)
class _Level:
    policy: QueuePolicy
    queue: collections.deque[Pending] = field(default_factory=collections.deque)
    delayed: collections.deque[Pending] = field(default_factory=collections.deque)
    size: int = 0  # requests queued (not removed), for max_queue_size


class DynamicBatcher:
    __slots__ = (
        "_arrived",
        "_delay_env",
        "_dispatcher",
        "_in_order",
        "default_level",
        "delay_ns",
        "levels",
        "max_batch_size",
        "max_preferred",
        "max_priority",
        "pool",
        "preferred",
        "preserve_ordering",
        "ragged",
        "ragged_inputs",
        "stats",
    )

    def __init__(self, pool: InstancePool, config: Any, stats: ModelStats) -> None:
        db = config.dynamic_batching
        self.pool = pool
        self.stats = stats
        self.max_batch_size = max(1, int(config.max_batch_size))
        self.preferred = {int(p) for p in db.preferred_batch_size if 0 < int(p) <= self.max_batch_size}
        # Normalisation makes [max_batch_size] the default; a config built in a test may not have run it.
        self.max_preferred = max(self.preferred, default=self.max_batch_size)
        self.delay_ns = int(db.max_queue_delay_microseconds) * 1000
        self.preserve_ordering = bool(db.preserve_ordering)
        levels = max(1, int(db.priority_levels))
        # Config validation keeps default_priority_level within [1, priority_levels] when levels are set.
        self.default_level = int(db.default_priority_level) if db.priority_levels else 1
        default_policy = QueuePolicy.from_config(db.default_queue_policy)
        self.levels: dict[int, _Level] = {}
        for level in range(1, levels + 1):
            policy = db.priority_queue_policy.get(level)
            self.levels[level] = _Level(
                QueuePolicy.from_config(policy) if policy is not None else default_policy
            )
        self.max_priority = levels if db.priority_levels else 0
        # Requests wait here while every instance is busy, as in Triton: not handed ahead, one batch at a time, to
        # a busy python stub's pipeline. Here they form the next batch whole (L0_batcher's max_queue_delay tests
        # count the executions), are counted as pending, and a queue timeout rejects them on time
        # (queue_timeout_test).
        pool.stop_pipelining()
        self._arrived = asyncio.Event()
        self._dispatcher: asyncio.Task[None] | None = None
        # preserve_ordering: the batches sent and not yet answered, in the order they were sent.
        self._in_order: collections.deque[_Running] = collections.deque()
        self._delay_env = _env_delay()
        # Ragged inputs and batch inputs/outputs (scheduling/ragged.py), for models executing whole batches.
        self.ragged = (
            RaggedBatching(config) if RaggedBatching.wanted(config) and not pool.request_level else None
        )
        # A request-level model (python) gets its requests as they are: an input allowing a ragged batch lets
        # requests of other shapes share a batch there too, as Triton's batcher allows.
        self.ragged_inputs = frozenset(t.name for t in config.input if t.allow_ragged_batch)

    # -- queueing ------------------------------------------------------------------------------------------

    def _level_of(self, priority: int) -> int:
        # Triton: priority 0, or one past the configured levels, means the default level.
        if priority == 0 or priority > self.max_priority:
            return self.default_level
        return priority

    def queued(self) -> int:
        """Requests waiting (DELAY-expired ones included): O(levels), unlike listing the candidates."""
        return sum(level.size for level in self.levels.values())

    async def execute(self, job: Job, priority: int = 0, timeout_us: int = 0) -> Arrays:
        level_no = self._level_of(priority)
        level = self.levels[level_no]
        if level.policy.max_queue_size and level.size >= level.policy.max_queue_size:
            raise Rejected("Exceeds maximum queue size")
        loop = asyncio.get_running_loop()
        now = time.perf_counter_ns()
        key = (
            batch_key(job.inputs, self.ragged_inputs) if self.ragged is None else self.ragged.key(job.inputs)
        )
        pending = Pending(job, key, level_no, loop.create_future(), now)
        timeout = level.policy.timeout_ns(timeout_us)
        if timeout:
            pending.deadline_ns = now + timeout
            pending.timer = loop.call_later(timeout / 1e9, self._expire, pending)
        level.queue.append(pending)
        level.size += 1
        self._arrived.set()
        if self._dispatcher is None or self._dispatcher.done():
            self._dispatcher = loop.create_task(self._dispatch())
        try:
            return await pending.future
        finally:
            if not pending.removed:  # the caller went away while queued
                self._remove(pending)

    def _remove(self, pending: Pending) -> None:
        pending.removed = True
        self.levels[pending.level].size -= 1
        if pending.timer is not None:
            pending.timer.cancel()

    def _expire(self, pending: Pending) -> None:
        if pending.removed:
            return
        if self.levels[pending.level].policy.reject_on_timeout:
            self._remove(pending)
            if not pending.future.done():
                pending.future.set_exception(Rejected(_TIMEOUT_MESSAGE))
        else:
            pending.expired = True
            self.levels[pending.level].delayed.append(pending)

    # -- batch forming -------------------------------------------------------------------------------------

    def _candidates(self) -> Iterator[Pending]:
        """Queued requests in the order they may be batched: by level, oldest first; delayed ones last. Lazily:
        a batch takes a few from the head of a queue that may hold many (64 clients, batches of 8)."""
        for level in self.levels.values():
            queue = level.queue
            while queue and queue[0].removed:
                queue.popleft()
            for pending in queue:
                if not pending.removed and not pending.expired:
                    yield pending
        for level in self.levels.values():
            delayed = level.delayed
            while delayed and delayed[0].removed:
                delayed.popleft()
            for pending in delayed:
                if not pending.removed:
                    yield pending

    def _oldest_enqueued_ns(self) -> int | None:
        """When the request that has waited longest arrived. A level's queue is in arrival order, so its first
        waiting request is its oldest; the delayed ones (expired, DELAY policy) are few, and looked at whole."""
        oldest: int | None = None
        for level in self.levels.values():
            for pending in level.queue:
                if not pending.removed and not pending.expired:
                    if oldest is None or pending.enqueued_ns < oldest:
                        oldest = pending.enqueued_ns
                    break
            for pending in level.delayed:
                if not pending.removed and (oldest is None or pending.enqueued_ns < oldest):
                    oldest = pending.enqueued_ns
        return oldest

    def _form(self, force: bool) -> list[Pending] | None:
        """The batch to send now, or None to wait for more requests (`force`: the oldest has waited the delay).

        Triton's GetDynamicBatch: the queue is walked in order and the batch is the run of requests at its head
        that can be concatenated, never skipping one (a request whose inputs differ, or which would take the rows
        past max_batch_size, ends it and cannot join, so the batch goes at once). Sent without waiting: the
        longest prefix whose rows are a preferred size, else the requests that fit before the rows would pass the
        largest preferred size, else a batch that has reached the largest preferred size (a single request may
        be larger) or that was ended so."""
        candidates = self._candidates()
        head = next(candidates, None)
        if head is None:
            return None
        if self.delay_ns:
            oldest = self._oldest_enqueued_ns()
            # As Triton: past the delay, what is pending goes whole, not cut at a preferred size.
            if oldest is not None and time.perf_counter_ns() - oldest >= self.delay_ns:
                force = True
        batch: list[Pending] = []
        rows = 0
        at_once = 0  # length of the prefix to send at once (0: none)
        ended = False  # the next request cannot join: the batch can grow no further
        for pending in itertools.chain((head,), candidates):
            size = pending.job.batch_size
            if batch:
                if rows + size > self.max_preferred and not at_once:
                    at_once = len(batch)
                if rows + size > self.max_batch_size or pending.key != head.key:
                    ended = True
                    break
            batch.append(pending)
            rows += size
            if rows in self.preferred:
                at_once = len(batch)
        if force:
            return batch
        if at_once:
            return batch[:at_once]
        if ended or rows >= self.max_preferred or self.delay_ns == 0:
            return batch
        return None  # wait for more, until the oldest request has waited max_queue_delay

    def _oldest_wait_deadline(self) -> int:
        oldest = self._oldest_enqueued_ns()
        return 0 if oldest is None else oldest + self.delay_ns

    async def _next_batch(self) -> list[Pending]:
        while True:
            if self._delay_env is not None:
                # Test hook (TRITONSERVER_DELAY_SCHEDULER=N): hold everything until N requests are queued.
                if self.queued() < self._delay_env:
                    await self._wait_arrival(None)
                    continue
                self._delay_env = None
            batch = self._form(force=False)
            if batch is not None:
                return batch
            if self.queued() == 0:
                await self._wait_arrival(None)
                continue
            deadline = self._oldest_wait_deadline()
            remaining = (deadline - time.perf_counter_ns()) / 1e9
            if remaining <= 0:
                forced = self._form(force=True)
                if forced:
                    return forced
                continue
            await self._wait_arrival(remaining)

    async def _wait_arrival(self, timeout: float | None) -> None:
        self._arrived.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._arrived.wait(), timeout)

    async def _dispatch(self) -> None:
        while self.queued():
            worker = await self.pool.acquire()
            try:
                batch = await self._next_batch()
            except BaseException:
                self.pool.release(worker)
                raise
            for pending in batch:
                self._remove(pending)
            self._launch(worker, batch)

    # -- execution -----------------------------------------------------------------------------------------

    def _launch(self, worker: Worker, batch: list[Pending]) -> None:
        """Start a batch on `worker` now (no task to schedule first); its answers are split off when it ends."""
        started = time.perf_counter_ns()
        for pending in batch:
            pending.job.timing.queue_ns = started - pending.enqueued_ns
        rows = sum(p.job.batch_size for p in batch)
        if self.pool.request_level:
            self._launch_requests(worker, batch, rows, started)
            return
        if self.ragged is not None:
            inputs = self.ragged.compose([p.job.inputs for p in batch])
        elif len(batch) == 1:
            inputs = batch[0].job.inputs
        else:
            names = batch[0].job.inputs
            inputs = {name: np.concatenate([p.job.inputs[name] for p in batch]) for name in names}
        output_names = sorted({n for p in batch for n in p.job.output_names})
        input_ns = time.perf_counter_ns() - started
        running = _Running(batch, Job(inputs, output_names, rows), input_ns)
        if self.preserve_ordering:
            self._in_order.append(running)
        result: asyncio.Future[Arrays] = asyncio.get_running_loop().create_future()
        result.add_done_callback(lambda f: self._complete(running, f))
        self.pool.start(worker, running.job, result)

    def _launch_requests(self, worker: Worker, batch: list[Pending], rows: int, started: int) -> None:
        """A batch for a request-level instance (python models): the requests go as they are, each answered
        on its own, so nothing is concatenated or split."""
        running = _Running(batch, Job({}, [], rows), time.perf_counter_ns() - started)
        if self.preserve_ordering:
            self._in_order.append(running)
        result: asyncio.Future[JobOutcomes] = asyncio.get_running_loop().create_future()
        result.add_done_callback(lambda f: self._complete_requests(running, f))
        self.pool.start_jobs(worker, [p.job for p in batch], result)

    def _complete_requests(self, running: _Running, result: asyncio.Future[JobOutcomes]) -> None:
        running.answers = result.result()
        infer_ns = running.batch[0].job.timing.infer_ns
        self.stats.executed(running.job.batch_size, running.input_ns, infer_ns, 0)
        self._finish(running)

    def _complete(self, running: _Running, result: asyncio.Future[Arrays]) -> None:
        split_started = time.perf_counter_ns()
        error = result.exception()
        if error is None and self.ragged is not None:
            try:
                running.answers.extend(
                    self.ragged.split(
                        result.result(),
                        [(p.job.inputs, p.job.batch_size, p.job.output_names) for p in running.batch],
                    )
                )
            except InternalError as e:
                error = e
            except Exception as e:  # e.g. an output the model did not produce: each caller hears of it
                error = InternalError(f"failed to split the outputs of the batch: {type(e).__name__}: {e}")
        elif error is None:
            outputs = result.result()
            offset = 0
            for pending in running.batch:
                n = pending.job.batch_size
                running.answers.append(
                    {name: outputs[name][offset : offset + n] for name in pending.job.output_names}
                )
                offset += n
        running.error = error
        output_ns = time.perf_counter_ns() - split_started
        job = running.job
        self.stats.executed(job.batch_size, running.input_ns, job.timing.infer_ns, output_ns)
        for pending in running.batch:
            pending.job.timing.input_ns += running.input_ns
            pending.job.timing.infer_ns = job.timing.infer_ns
        self._finish(running)

    def _finish(self, running: _Running) -> None:
        running.done = True
        if not self.preserve_ordering:
            running.answer()
            return
        if self._in_order and self._in_order[0] is not running:
            running.finished_ns = time.perf_counter_ns()  # its answers wait for the batches sent before it
        # Answers leave in arrival order: a batch that ends early waits for the batches sent before it.
        while self._in_order and self._in_order[0].done:
            self._in_order.popleft().answer()


@dataclass(eq=False, slots=True)
class _Running:
    batch: list[Pending]
    job: Job
    input_ns: int
    answers: list[Arrays | BaseException] = field(default_factory=list)
    error: BaseException | None = None
    done: bool = False
    finished_ns: int = 0  # preserve_ordering: when its execution ended (its answers may wait after that)

    def answer(self) -> None:
        held = time.perf_counter_ns() - self.finished_ns if self.finished_ns else 0
        for i, pending in enumerate(self.batch):
            pending.job.timing.held_ns = held
            if pending.future.done():  # the caller went away
                continue
            answer = self.error if self.error is not None else self.answers[i]
            if isinstance(answer, BaseException):
                pending.future.set_exception(answer)
            else:
                pending.future.set_result(answer)


def _env_delay() -> int | None:
    """TRITONSERVER_DELAY_SCHEDULER=N: Triton's test hook to hold requests until N are queued."""
    raw = os.environ.get("TRITONSERVER_DELAY_SCHEDULER")
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value > 0 else None
