"""A pool of model instances; a request goes to an idle instance.

Dispatch is to an idle instance, never round-robin onto a busy one: idle instances wait in a LIFO stack (the
most recently used one has the warmest caches) and callers wait in FIFO order for the next instance to free up.
A request that waits hands its job to the queue, and the instance that frees up starts it from its completion
callback: under load an instance goes from one request to the next without waiting for the waiting caller's
task to be scheduled on a busy event loop.

Where a request runs: each instance owns a worker thread, and runtimes release the GIL, so instances execute
in parallel with each other and with the event loop. But handing a request to a thread and back costs tens to
hundreds of microseconds on a busy host (measured: ~85 us on 2 cores), more than a small model takes to run.
So the pool times every execution, and while a model's typical execution is shorter than that hand-off and the
request's inputs are small, it runs on the event loop thread itself: the same instance, the same exclusivity,
without the two thread switches.

Instance updates (instance_update.py): `add` puts new instances into service at once, `retire` takes instances out
of it; a retired instance finishes what it runs, then closes (its model's finalize) off the event loop.

Rate limiting (scheduling/rate_limiter.py): with the limiter on and instances that ask it for resources, an
instance that is handed a job (`start`, `start_jobs`) first stages it with the limiter and runs it once granted
its resources; it holds them until the execution ends (`release`). Waiting for an instance is unchanged, and
nothing is held while a batcher forms a batch. Pools of models that ask for no resources, and every pool with
the limiter off, never reach the limiter.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from modelhost.backends.api import Arrays, Job, JobOutcomes, ModelInstance, RequestLevelInstance
from modelhost.engine.scheduling.rate_limiter import InstanceNeeds, RateLimiter, Slot
from modelhost.errors import Unavailable
from modelhost.host.host_policy import bind_thread, placement_of

log = logging.getLogger(__name__)

# Run on the event loop once the typical execution (CPU time) is shorter than this (and until it passes twice
# that), for inputs smaller than that.
INLINE_MAX_NS = 100_000
INLINE_MAX_INPUT_BYTES = 64 * 1024
# Executions timed on worker threads before the pool may decide to run a model inline.
_WARMUP_RUNS = 16
_EWMA_WEIGHT = 0.05


class Worker:
    __slots__ = ("batches", "granted", "instance", "requests", "retired", "slot", "spare", "thread")

    def __init__(self, instance: ModelInstance | RequestLevelInstance) -> None:
        self.instance = instance
        self.requests = instance if isinstance(instance, RequestLevelInstance) else None
        self.batches = None if isinstance(instance, RequestLevelInstance) else instance
        self.spare = False
        self.retired = False  # out of service (an instance update): it closes once its job ends
        # The instance's place with the rate limiter, when its pool is rate limited, and whether it holds its
        # resources now (from the limiter's grant to the end of the execution).
        self.slot: Slot | None = None
        self.granted = False
        # One thread per instance: an instance is never entered by two threads at once. A request-level instance
        # (a python model's stub process) is driven from the event loop and needs none.
        self.thread = (
            None
            if self.requests is not None
            else ThreadPoolExecutor(
                max_workers=1,
                thread_name_prefix=f"instance-{instance.name}",
                # Where its host policy (--host-policy) puts it, as the thread that built it was.
                initializer=bind_thread,
                initargs=(placement_of(instance),),
            )
        )

    def close(self) -> None:
        if self.thread is not None:
            self.thread.shutdown(wait=True)
        self.instance.close()


@dataclass(eq=False, slots=True)
class _Retiring:
    """An instance taken out of service: its workers, those still running a job, and its closing."""

    workers: list[Worker]
    busy: set[int]
    closed: asyncio.Future[None]


@dataclass(eq=False, slots=True)
class _QueuedJob:
    job: Job
    result: asyncio.Future[Arrays]
    queued_ns: int


class InstancePool:
    __slots__ = (
        "_idle", "_idle_spares", "_inline_now", "_limiter", "_pinned", "_pipelining", "_retiring", "_runs",
        "_spares", "_typical_ns", "_waiters", "_workers", "request_level",
    )

    def __init__(
        self,
        instances: list[ModelInstance] | list[RequestLevelInstance],
        limiter: RateLimiter | None = None,
        needs: list[InstanceNeeds] | None = None,
    ) -> None:
        """`needs`: what each instance asks of `limiter` (None or no resources anywhere: not rate limited).
        Raises ModelConfigError when the limiter cannot serve them."""
        # Rate limited: only when some instance asks for resources (one that asks for none never waits).
        limited = limiter is not None and needs is not None and any(n.resources for n in needs)
        self._limiter = limiter if limited else None
        self._pipelining = True
        # Retired instances still running a job, by id(instance).
        self._retiring: dict[int, _Retiring] = {}
        slots: list[Slot] = []
        if self._limiter is not None:
            assert needs is not None and len(needs) == len(instances)
            slots = self._limiter.register(needs)
        # An instance may take a next job while it runs one (a python stub, which runs them one after the
        # other): a worker per place in its pipeline, so the next job is already there when the first ends.
        # These spare workers are used only when every instance already has a job: a job never waits behind
        # another on one instance while a second instance sits idle. None when rate limited: a job queued in
        # a stub behind another would hold resources without executing.
        self._workers = [Worker(i) for i in instances]
        for worker, slot in zip(self._workers, slots, strict=False):
            worker.slot = slot
        self._spares = [
            Worker(i)
            for i in instances
            for _ in range(0 if self._limiter is not None else getattr(i, "pipeline_depth", 1) - 1)
        ]
        for spare in self._spares:
            spare.spare = True
        self.request_level = bool(self._workers) and self._workers[0].requests is not None
        self._idle: list[Worker] = list(reversed(self._workers))
        self._idle_spares: list[Worker] = list(reversed(self._spares))
        # FIFO of callers waiting for an instance: a batcher's acquire() or a queued job.
        self._waiters: collections.deque[asyncio.Future[Worker] | _QueuedJob] = collections.deque()
        # Callers waiting for one particular instance (a sequence batcher: a sequence's requests all run on the
        # instance that holds its state); served before the FIFO above when that instance frees up.
        self._pinned: dict[int, collections.deque[asyncio.Future[Worker]]] = {}
        self._runs = 0
        self._typical_ns = 0.0  # moving average of execution CPU times
        self._inline_now = False

    def __len__(self) -> int:
        return len(self._workers)

    @property
    def runs_inline(self) -> bool:
        return self._inline_now

    def _observe(self, elapsed_ns: int) -> None:
        self._runs += 1
        if self._runs == 1:
            self._typical_ns = float(elapsed_ns)
        else:
            self._typical_ns += _EWMA_WEIGHT * (elapsed_ns - self._typical_ns)
        # Hysteresis: a model near the threshold does not flip between the loop and its threads.
        if self._inline_now:
            self._inline_now = self._typical_ns < 2 * INLINE_MAX_NS
        else:
            self._inline_now = self._runs >= _WARMUP_RUNS and self._typical_ns < INLINE_MAX_NS

    def pending(self) -> int:
        """Requests waiting for an instance: queued here, or handed ahead to a busy instance's pipeline (a python
        stub runs one job at a time: all but one of its busy workers' jobs wait there, as Triton counts them)."""
        queued = sum(1 for w in self._waiters if isinstance(w, _QueuedJob) and not w.result.done())
        if not self._spares:
            return queued
        idle = {id(w) for w in self._idle} | {id(w) for w in self._idle_spares}
        busy: dict[int, int] = {}
        for worker in self._workers + self._spares:
            if id(worker) not in idle:
                busy[id(worker.instance)] = busy.get(id(worker.instance), 0) + 1
        return queued + sum(n - 1 for n in busy.values())

    def stop_pipelining(self) -> None:
        """No next job handed to an instance while it runs one (before the pool is used): every job waits in
        its scheduler's queue until an instance is free."""
        self._pipelining = False
        self._spares = []
        self._idle_spares = []

    @property
    def rate_limited(self) -> bool:
        """Whether the instances wait for the rate limiter's resources."""
        return self._limiter is not None

    def add(self, instances: list[Any], needs: list[InstanceNeeds] | None = None) -> list[Worker]:
        """Put new instances into service now (an instance update); their workers, in order. Raises
        ModelConfigError, with nothing changed, when the rate limiter cannot serve them."""
        slots = self._limiter.register(needs) if self._limiter is not None and needs is not None else []
        workers = [Worker(i) for i in instances]
        for worker, slot in zip(workers, slots, strict=False):
            worker.slot = slot
        spares = [
            Worker(i)
            for i in instances
            for _ in range(getattr(i, "pipeline_depth", 1) - 1 if self._pipelining and not slots else 0)
        ]
        for spare in spares:
            spare.spare = True
        self._workers.extend(workers)
        self._spares.extend(spares)
        for worker in workers + spares:
            self.release(worker)  # to the first waiter, or idle
        return workers

    def retire(self, instances: list[Any]) -> asyncio.Future[list[None]]:
        """Take instances out of service (an instance update): no job goes to them any more, and each closes once
        the job it runs ends. Resolves once all of them are closed."""
        loop = asyncio.get_running_loop()
        ids = {id(i) for i in instances}
        leaving = [w for w in self._workers + self._spares if id(w.instance) in ids]
        idle = {id(w) for w in self._idle} | {id(w) for w in self._idle_spares}
        self._workers = [w for w in self._workers if id(w.instance) not in ids]
        self._spares = [w for w in self._spares if id(w.instance) not in ids]
        self._idle = [w for w in self._idle if id(w.instance) not in ids]
        self._idle_spares = [w for w in self._idle_spares if id(w.instance) not in ids]
        closings: list[asyncio.Future[None]] = []
        for instance in instances:
            mine = [w for w in leaving if w.instance is instance]
            for worker in mine:
                worker.retired = True
                self._pinned.pop(id(worker), None)
            retiring = _Retiring(mine, {id(w) for w in mine if id(w) not in idle}, loop.create_future())
            closings.append(retiring.closed)
            self._retiring[id(instance)] = retiring
            if not retiring.busy:
                self._close_retired(retiring)
        return asyncio.gather(*closings)

    def _retired_done(self, worker: Worker) -> None:
        """A retired instance's worker ended its job: the instance closes once none of its workers runs one."""
        retiring = self._retiring.get(id(worker.instance))
        if retiring is None:
            return
        retiring.busy.discard(id(worker))
        if not retiring.busy:
            self._close_retired(retiring)

    def _close_retired(self, retiring: _Retiring) -> None:
        """Close a retired instance off the event loop (a python model's finalize waits on it)."""
        instance = retiring.workers[0].instance
        del self._retiring[id(instance)]
        slots = [w.slot for w in retiring.workers if w.slot is not None]

        def close() -> None:
            for worker in retiring.workers[1:]:
                if worker.thread is not None:
                    worker.thread.shutdown(wait=True)
            retiring.workers[0].close()

        def closed(done: asyncio.Future[None]) -> None:
            if self._limiter is not None and slots:
                self._limiter.unregister(slots)
            if not done.cancelled() and done.exception() is not None:
                log.error("failed to close model instance '%s': %s", instance.name, done.exception())
            if not retiring.closed.done():
                retiring.closed.set_result(None)

        asyncio.get_running_loop().run_in_executor(None, close).add_done_callback(closed)

    async def acquire(self) -> Worker:
        """The next idle instance (waiting in FIFO order for one); hand it to `run` or back to `release`."""
        if (self._idle or self._idle_spares) and not self._waiters:
            return self._pop_idle()
        waiter: asyncio.Future[Worker] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(waiter.result())  # handed over just as we were cancelled: pass it on
            elif waiter in self._waiters:  # release may already have dropped it as cancelled
                self._waiters.remove(waiter)
            raise

    @property
    def workers(self) -> list[Worker]:
        """One worker per instance (spares left out), in instance order."""
        return list(self._workers)

    async def acquire_worker(self, worker: Worker) -> Worker:
        """That instance once it is idle; hand it to `start`/`start_jobs` or back to `release`."""
        waiters = self._pinned.setdefault(id(worker), collections.deque())
        if worker in self._idle and not waiters:
            self._idle.remove(worker)
            return worker
        waiter: asyncio.Future[Worker] = asyncio.get_running_loop().create_future()
        waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(waiter.result())
            elif waiter in waiters:
                waiters.remove(waiter)
            raise

    def release(self, worker: Worker) -> None:
        """Give the instance to the first live waiter, or back to the idle stack."""
        if worker.granted:
            self._release_resources(worker)
            return
        if worker.retired:
            self._retired_done(worker)
            return
        pinned = self._pinned.get(id(worker))
        while pinned:
            claimant = pinned.popleft()
            if not claimant.done():
                claimant.set_result(worker)
                return
        while self._waiters:
            waiter = self._waiters.popleft()
            if isinstance(waiter, _QueuedJob):
                if waiter.result.done():  # its caller went away
                    continue
                if self._inline(waiter.job):
                    # Not from inside this call: a chain of inline jobs would recurse.
                    asyncio.get_running_loop().call_soon(
                        self.start, worker, waiter.job, waiter.result, waiter.queued_ns
                    )
                else:
                    self.start(worker, waiter.job, waiter.result, waiter.queued_ns)
                return
            if not waiter.done():
                waiter.set_result(worker)
                return
        (self._idle_spares if worker.spare else self._idle).append(worker)

    def _release_resources(self, worker: Worker) -> None:
        """The end of a rate-limited execution: its resources go back, the instance to its next waiter (whose
        job is staged before the limiter grants anything, so that it competes), then the limiter grants."""
        assert self._limiter is not None and worker.slot is not None
        worker.granted = False
        self._limiter.release(worker.slot)
        self.release(worker)
        self._limiter.dispatch()

    def _when_granted(self, worker: Worker, begin: Callable[[], None], result: asyncio.Future[Any]) -> None:
        """Stage the job `begin` starts with the limiter; it starts once `worker` holds its resources."""
        assert self._limiter is not None and worker.slot is not None

        def granted() -> None:
            worker.granted = True
            try:
                begin()
            except Exception as e:  # it never started: its resources must not stay held
                self.release(worker)
                if not result.done():
                    result.set_exception(e)

        def dropped() -> None:
            if not result.done():
                result.set_exception(Unavailable(f"model instance '{worker.instance.name}' was unloaded"))

        self._limiter.stage(worker.slot, granted, dropped)
        self._limiter.dispatch()

    def _pop_idle(self) -> Worker:
        return self._idle.pop() if self._idle else self._idle_spares.pop()

    def _inline(self, job: Job) -> bool:
        return self.runs_inline and sum(a.nbytes for a in job.inputs.values()) <= INLINE_MAX_INPUT_BYTES

    def _timed(self, worker: Worker, job: Job) -> tuple[Arrays, int, int]:
        """The outputs, the wall-clock time of the execution (for the statistics) and the CPU time of the calling
        thread (for the inline decision: unlike wall-clock time, it leaves out waiting for the GIL on a busy
        host, which would otherwise make a 20 us model look slow and push it off the loop for good)."""
        started, cpu_started = time.perf_counter_ns(), time.thread_time_ns()
        assert worker.batches is not None
        result = worker.batches.execute(job.inputs, job.output_names)
        return result, time.perf_counter_ns() - started, time.thread_time_ns() - cpu_started

    def start(self, worker: Worker, job: Job, result: asyncio.Future[Arrays], queued_ns: int = 0) -> None:
        """Run `job` on `worker` (inline or on its thread), resolve `result`, then release the instance."""
        if self._limiter is not None and not worker.granted:
            self._when_granted(worker, lambda: self.start(worker, job, result, queued_ns), result)
            return
        if queued_ns:
            job.timing.queue_ns = time.perf_counter_ns() - queued_ns
        if worker.requests is not None:
            self._submit(worker, [job], lambda outcomes: _first_outcome(outcomes, result))
            return
        if self._inline(job):
            try:
                outcome: tuple[Arrays, int, int] | BaseException = self._timed(worker, job)
            except Exception as e:
                outcome = e
            self._finish(worker, job, result, outcome)
            return
        loop = asyncio.get_running_loop()

        def on_thread() -> None:
            try:
                outcome: tuple[Arrays, int, int] | BaseException = self._timed(worker, job)
            except Exception as e:
                outcome = e
            loop.call_soon_threadsafe(self._finish, worker, job, result, outcome)

        assert worker.thread is not None
        worker.thread.submit(on_thread)

    def _finish(
        self,
        worker: Worker,
        job: Job,
        result: asyncio.Future[Arrays],
        outcome: tuple[Arrays, int, int] | BaseException,
    ) -> None:
        # The result first, then the instance: both only schedule what follows them, and the caller's completion
        # callbacks must run before the instance's next user does (a sequence's next request reads the state
        # its predecessor's completion wrote); the next queued job still starts in this same call.
        if isinstance(outcome, BaseException):
            if not result.done():
                result.set_exception(outcome)
        else:
            arrays, elapsed, cpu = outcome
            self._observe(cpu)
            job.timing.infer_ns = elapsed
            if not result.done():  # the caller may have gone away meanwhile
                result.set_result(arrays)
        self.release(worker)

    def start_jobs(self, worker: Worker, jobs: list[Job], result: asyncio.Future[JobOutcomes]) -> None:
        """Run requests on a request-level instance; `result` gets one outcome per job, in order."""
        if self._limiter is not None and not worker.granted:
            self._when_granted(worker, lambda: self.start_jobs(worker, jobs, result), result)
            return
        self._submit(worker, jobs, lambda outcomes: None if result.done() else result.set_result(outcomes))

    def _submit(self, worker: Worker, jobs: list[Job], answer: Callable[[JobOutcomes], None]) -> None:
        assert worker.requests is not None
        started = time.perf_counter_ns()

        def done(outcomes: JobOutcomes) -> None:
            elapsed = time.perf_counter_ns() - started
            for job in jobs:
                job.timing.infer_ns = elapsed
            answer(outcomes)  # before the release, as in _finish
            self.release(worker)

        worker.requests.submit(jobs, done)

    async def execute(self, job: Job) -> Arrays:
        """The default scheduler: each request alone, on the first idle instance."""
        result: asyncio.Future[Arrays] = asyncio.get_running_loop().create_future()
        queued = time.perf_counter_ns()
        if (self._idle or self._idle_spares) and not self._waiters:
            self.start(self._pop_idle(), job, result, queued)
        else:
            self._waiters.append(_QueuedJob(job, result, queued))
        return await result

    def close(self) -> None:
        if self._limiter is not None:
            self._limiter.unregister([w.slot for w in self._workers if w.slot is not None])
        closed: set[int] = set()
        for worker in self._workers + self._spares:
            if id(worker.instance) not in closed:
                closed.add(id(worker.instance))
                worker.close()

    @property
    def instances(self) -> list[ModelInstance | RequestLevelInstance]:
        return list({id(w.instance): w.instance for w in self._workers}.values())


def _first_outcome(outcomes: JobOutcomes, result: asyncio.Future[Arrays]) -> None:
    if result.done():
        return
    outcome = outcomes[0]
    if isinstance(outcome, BaseException):
        result.set_exception(outcome)
    else:
        result.set_result(outcome)
