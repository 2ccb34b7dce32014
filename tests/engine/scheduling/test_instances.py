"""The instance pool through its seam, with a fake backend instance."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import numpy as np
import pytest

from modelhost.backends.api import Arrays, Job
from modelhost.engine.scheduling.instances import INLINE_MAX_INPUT_BYTES, InstancePool


class FakeInstance:
    def __init__(
        self, name: str, delay: float = 0.0, fail: bool = False, barrier: threading.Barrier | None = None
    ) -> None:
        self.name = name
        self.delay = delay
        # Executions of instances sharing a barrier meet there: they can only pass if they run at the same time.
        self.barrier = barrier
        self.fail = fail
        self.threads: list[str] = []
        self.active = 0
        self.max_active = 0
        self.closed = False

    def execute(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        self.threads.append(threading.current_thread().name)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if self.delay:
                time.sleep(self.delay)
            if self.barrier is not None:
                self.barrier.wait(timeout=30)
            if self.fail:
                raise ValueError("boom")
            return {"OUT": inputs["IN"] + 1}
        finally:
            self.active -= 1

    def close(self) -> None:
        self.closed = True


def job(size: int = 4) -> Job:
    return Job({"IN": np.zeros(size, dtype=np.float32)}, ["OUT"], 1)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_fast_model_moves_onto_the_event_loop_after_warmup() -> None:
    instance = FakeInstance("fast")
    pool = InstancePool([instance])

    async def go() -> None:
        for _ in range(40):
            out = await pool.execute(job())
            assert out["OUT"].tolist() == [1, 1, 1, 1]

    run(go())
    main = threading.main_thread().name
    assert all(t != main for t in instance.threads[:16])  # timed on the worker thread first
    assert instance.threads[-1] == main
    assert pool.runs_inline
    pool.close()
    assert instance.closed


def test_large_inputs_never_run_inline() -> None:
    instance = FakeInstance("fast")
    pool = InstancePool([instance])

    async def go() -> None:
        for _ in range(20):
            await pool.execute(job())
        await pool.execute(job(INLINE_MAX_INPUT_BYTES))  # float32: 4x the limit

    run(go())
    assert pool.runs_inline
    assert instance.threads[-1] != threading.main_thread().name
    pool.close()


def test_slow_model_stays_on_worker_threads_and_instances_run_in_parallel() -> None:
    # The two instances' executions meet at a barrier, which they pass only when both run at once: run one after
    # the other, the first would wait there until its timeout and fail.
    barrier = threading.Barrier(2)
    instances = [
        FakeInstance("a", delay=0.05, barrier=barrier),
        FakeInstance("b", delay=0.05, barrier=barrier),
    ]
    pool = InstancePool(list(instances))

    async def go() -> None:
        await asyncio.gather(*(pool.execute(job()) for _ in range(8)))

    run(go())
    assert not pool.runs_inline
    assert all(i.max_active == 1 for i in instances)  # an instance is never entered twice at once
    assert len(instances[0].threads) == len(instances[1].threads) == 4  # they took turns, two at a time
    pool.close()


def test_errors_reach_the_caller_and_free_the_instance() -> None:
    instance = FakeInstance("bad", fail=True)
    pool = InstancePool([instance])

    async def go() -> None:
        for _ in range(3):
            with pytest.raises(ValueError, match="boom"):
                await pool.execute(job())

    run(go())
    pool.close()


def test_cancelled_waiter_does_not_lose_the_instance() -> None:
    instance = FakeInstance("slow", delay=0.05)
    pool = InstancePool([instance])

    async def go() -> None:
        first = asyncio.create_task(pool.execute(job()))
        await asyncio.sleep(0.01)
        waiting = asyncio.create_task(pool.execute(job()))
        await asyncio.sleep(0.01)
        waiting.cancel()
        await first
        # The instance is free again: a new request is served.
        assert (await asyncio.wait_for(pool.execute(job()), 5))["OUT"].tolist() == [1, 1, 1, 1]

    run(go())
    pool.close()


def test_many_cancelled_waiters_leave_the_pool_consistent() -> None:
    """Waiters cancelled while an instance is being handed over (a client going away mid-stream)."""
    instance = FakeInstance("slow", delay=0.01)
    pool = InstancePool([instance])

    async def go() -> None:
        tasks = [asyncio.create_task(pool.execute(job())) for _ in range(20)]
        await asyncio.sleep(0.015)
        for task in tasks[1::2]:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        served = [r for r in results if isinstance(r, dict)]
        assert served and all(r["OUT"].tolist() == [1, 1, 1, 1] for r in served)
        assert all(isinstance(r, dict | asyncio.CancelledError) for r in results)
        assert (await asyncio.wait_for(pool.execute(job()), 5))["OUT"].tolist() == [1, 1, 1, 1]

    run(go())
    assert instance.max_active == 1
    pool.close()


def test_waiter_cancelled_in_the_same_step_as_a_release() -> None:
    pool = InstancePool([FakeInstance("one")])

    async def go() -> None:
        worker = await pool.acquire()
        waiting = asyncio.create_task(pool.acquire())
        await asyncio.sleep(0)  # the waiter is queued
        waiting.cancel()  # cancels its future at once; the task itself runs later
        pool.release(worker)  # drops the cancelled waiter and keeps the instance idle
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert (await asyncio.wait_for(pool.execute(job()), 5))["OUT"].tolist() == [1, 1, 1, 1]

    run(go())
    pool.close()


def test_pending_counts_jobs_waiting_for_an_instance() -> None:
    pool = InstancePool([FakeInstance("slow", delay=0.05)])

    async def go() -> None:
        tasks = [asyncio.create_task(pool.execute(job())) for _ in range(3)]
        await asyncio.sleep(0.01)
        assert pool.pending() == 2  # one runs, two wait
        tasks[2].cancel()
        await asyncio.sleep(0)
        assert pool.pending() == 1  # a caller that went away is not pending
        await asyncio.gather(*tasks[:2])
        assert pool.pending() == 0

    run(go())
    pool.close()


class SpinningInstance(FakeInstance):
    """Burns CPU (a sleeping fake would cost no CPU time at all)."""

    spin_ns = 0

    def execute(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        end = time.thread_time_ns() + self.spin_ns
        while time.thread_time_ns() < end:
            pass
        return super().execute(inputs, output_names)


def test_inline_decision_follows_cpu_time_with_hysteresis() -> None:
    instance = SpinningInstance("spin")
    pool = InstancePool([instance])

    async def go() -> None:
        for _ in range(20):
            await pool.execute(job())
        assert pool.runs_inline
        instance.spin_ns = 150_000  # between the two thresholds: stays on the loop
        for _ in range(60):
            await pool.execute(job())
        assert pool.runs_inline
        instance.spin_ns = 1_000_000  # well past them: back to the worker thread
        for _ in range(40):
            await pool.execute(job())
        assert not pool.runs_inline
        assert instance.threads[-1] != threading.main_thread().name

    run(go())
    pool.close()


class PipelinedStub:
    """A request-level instance taking a next job while it runs one (as a python stub); answers when told."""

    pipeline_depth = 2

    def __init__(self) -> None:
        self.name = "stub"
        self.calls: list[tuple[list[Job], Any]] = []

    def submit(self, jobs: list[Job], done: Any) -> None:
        self.calls.append((jobs, done))

    def close(self) -> None:
        pass


def test_a_job_handed_ahead_to_a_busy_stub_counts_as_pending() -> None:
    # nv_inference_pending_request_count as Triton's (L0_metrics queue_size): a stub runs one job at a time.
    stub = PipelinedStub()
    pool = InstancePool([stub])  # type: ignore[list-item]

    async def go() -> None:
        tasks = [asyncio.create_task(pool.execute(job())) for _ in range(3)]
        while len(stub.calls) < 2:
            await asyncio.sleep(0.001)
        assert pool.pending() == 2  # one runs in the stub, one waits in it, one waits here
        for _ in range(3):
            while not stub.calls:
                await asyncio.sleep(0.001)
            jobs, done = stub.calls.pop(0)
            done([{"OUT": j.inputs["IN"]} for j in jobs])
        await asyncio.gather(*tasks)
        assert pool.pending() == 0

    run(go())


def test_an_added_instance_takes_a_waiting_job_at_once() -> None:
    busy = FakeInstance("busy", delay=0.2)
    pool = InstancePool([busy])

    async def go() -> None:
        first = asyncio.ensure_future(pool.execute(job()))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(pool.execute(job()))
        await asyncio.sleep(0)
        assert pool.pending() == 1  # waits for the only instance
        added = FakeInstance("added")
        pool.add([added])
        assert pool.pending() == 0  # handed to the new instance
        await asyncio.gather(first, second)
        assert len(added.threads) == 1
        assert len(pool) == 2

    run(go())


def test_a_retired_instance_finishes_its_job_then_closes_and_takes_no_more() -> None:
    leaving, staying = FakeInstance("leaving", delay=0.2), FakeInstance("staying")
    pool = InstancePool([leaving, staying])

    async def go() -> None:
        running = asyncio.ensure_future(pool.execute(job()))  # the most recently idle first: "leaving"
        await asyncio.sleep(0.05)
        assert leaving.active == 1
        closed = pool.retire([leaving])
        assert not leaving.closed  # its job runs to the end
        for _ in range(3):
            await pool.execute(job())
        assert (await running)["OUT"].tolist() == [1, 1, 1, 1]
        await closed
        assert leaving.closed and not staying.closed
        assert len(leaving.threads) == 1 and len(staying.threads) == 3
        assert pool.instances == [staying]

    run(go())


def test_an_idle_retired_instance_closes_at_once() -> None:
    leaving, staying = FakeInstance("leaving"), FakeInstance("staying")
    pool = InstancePool([leaving, staying])

    async def go() -> None:
        await pool.retire([leaving])
        assert leaving.closed
        await pool.execute(job())
        assert leaving.threads == [] and len(staying.threads) == 1

    run(go())
