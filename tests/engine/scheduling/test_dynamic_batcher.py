"""The dynamic batcher through its seam: a fake instance behind a real instance pool."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.backends.api import Arrays, Job
from modelhost.engine.scheduling.dynamic_batcher import DynamicBatcher
from modelhost.engine.scheduling.instances import InstancePool
from modelhost.errors import Rejected
from modelhost.observability.stats import ModelStats


class Recorder:
    """OUT = IN + 1; remembers the batch sizes it ran, can be slowed down or made to fail."""

    def __init__(self, name: str = "fake", delay: float = 0.0) -> None:
        self.name = name
        self.delay = delay
        self.batches: list[int] = []
        self.fail_next = False
        self.lock = threading.Lock()

    def execute(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        with self.lock:
            self.batches.append(int(inputs["IN"].shape[0]))
            fail, self.fail_next = self.fail_next, False
        if self.delay:
            time.sleep(self.delay)
        if fail:
            raise ValueError("backend failure")
        return {"OUT": inputs["IN"] + 1, "OUT2": inputs["IN"] * 2}

    def close(self) -> None:
        pass


def batcher(text: str, *instances: Recorder) -> tuple[DynamicBatcher, ModelStats]:
    config = text_format.Parse(text, ModelConfig())
    stats = ModelStats("m", "1")
    return DynamicBatcher(InstancePool(list(instances)), config, stats), stats


def job(value: int, rows: int = 1, width: int = 2, outputs: tuple[str, ...] = ("OUT",)) -> Job:
    return Job({"IN": np.full((rows, width), value, dtype=np.int32)}, list(outputs), rows)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_requests_within_the_delay_form_one_batch() -> None:
    fake = Recorder()
    b, stats = batcher(
        "max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 200000 preferred_batch_size: [ 4 ] }",
        fake,
    )

    async def go() -> list[Arrays]:
        return await asyncio.gather(*(b.execute(job(i)) for i in range(4)))

    results = run(go())
    assert fake.batches == [4]  # the preferred size went at once, without waiting the full delay
    assert [r["OUT"][0, 0] for r in results] == [1, 2, 3, 4]  # each request gets its own rows
    assert stats.execution_count == 1 and stats.inference_count == 4
    assert stats.batches[4].compute_infer.count == 1
    assert b.queued() == 0


def test_without_delay_requests_queue_while_the_instance_is_busy() -> None:
    fake = Recorder(delay=0.05)
    b, _ = batcher("max_batch_size: 8 dynamic_batching { }", fake)

    async def go() -> None:
        first = asyncio.create_task(b.execute(job(0)))
        await asyncio.sleep(0.01)  # the first runs alone; the next three wait for the instance
        await asyncio.gather(first, *(b.execute(job(i)) for i in range(3)))

    run(go())
    assert fake.batches == [1, 3]


def test_delay_expires_and_sends_a_partial_batch() -> None:
    fake = Recorder()
    b, _ = batcher(
        "max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 50000 preferred_batch_size: [ 8 ] }",
        fake,
    )

    first, second = job(1), job(2, rows=2)

    async def go() -> None:
        await asyncio.gather(b.execute(first), b.execute(second))

    run(go())
    assert fake.batches == [3]
    # The batch left once the oldest request had waited the whole delay (the batcher's own queue time), not before.
    assert max(first.timing.queue_ns, second.timing.queue_ns) >= 50_000_000


def test_batches_never_exceed_max_batch_size_and_shapes_do_not_mix() -> None:
    fake = Recorder(delay=0.02)
    b, _ = batcher("max_batch_size: 4 dynamic_batching { max_queue_delay_microseconds: 20000 }", fake)

    async def go() -> list[Arrays]:
        jobs = [job(i, rows=3) for i in range(2)] + [job(9, width=5) for _ in range(2)]
        return await asyncio.gather(*(b.execute(j) for j in jobs))

    results = run(go())
    assert all(size <= 4 for size in fake.batches)
    assert sorted(fake.batches) == [2, 3, 3]  # two 3-row requests cannot share; the width-5 pair can
    assert results[2]["OUT"].shape == (1, 5)


def test_union_of_requested_outputs_each_gets_its_own() -> None:
    fake = Recorder()
    b, _ = batcher(
        "max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 20000 preferred_batch_size: [ 2 ] }",
        fake,
    )

    async def go() -> list[Arrays]:
        return await asyncio.gather(b.execute(job(1, outputs=("OUT",))), b.execute(job(1, outputs=("OUT2",))))

    first, second = run(go())
    assert set(first) == {"OUT"} and set(second) == {"OUT2"}
    assert fake.batches == [2]


def test_full_queue_rejects_at_once() -> None:
    fake = Recorder(delay=0.1)
    b, _ = batcher("max_batch_size: 1 dynamic_batching { default_queue_policy { max_queue_size: 1 } }", fake)

    async def go() -> list[Any]:
        running = asyncio.create_task(b.execute(job(0)))
        await asyncio.sleep(0.02)  # running, not queued
        queued = asyncio.create_task(b.execute(job(1)))
        await asyncio.sleep(0.01)
        with pytest.raises(Rejected, match="Exceeds maximum queue size"):
            await b.execute(job(2))
        return await asyncio.gather(running, queued)

    assert len(run(go())) == 2
    assert b.queued() == 0


def test_queue_timeout_reject_and_override() -> None:
    fake = Recorder(delay=0.5)
    b, _ = batcher(
        "max_batch_size: 1 dynamic_batching { default_queue_policy { default_timeout_microseconds: 5000000 "
        "allow_timeout_override: true } }",
        fake,
    )

    async def go() -> None:
        running = asyncio.create_task(b.execute(job(0)))
        await asyncio.sleep(0.02)
        with pytest.raises(Rejected, match="Request timeout expired"):
            await b.execute(job(1), timeout_us=20_000)  # shorter than the policy's: honoured
        assert not running.done()  # refused while the instance is still busy, not once it is free
        await running

    run(go())
    assert fake.batches == [1]  # the timed-out request never ran
    assert b.queued() == 0


def test_delay_action_keeps_the_request() -> None:
    fake = Recorder(delay=0.05)
    b, _ = batcher(
        "max_batch_size: 1 dynamic_batching { default_queue_policy { timeout_action: DELAY "
        "default_timeout_microseconds: 10000 } }",
        fake,
    )

    async def go() -> list[Arrays]:
        return await asyncio.gather(*(b.execute(job(i)) for i in range(3)))

    results = run(go())
    assert [r["OUT"][0, 0] for r in results] == [1, 2, 3]


def test_priority_levels() -> None:
    fake = Recorder(delay=0.03)
    b, _ = batcher(
        "max_batch_size: 1 dynamic_batching { priority_levels: 2 default_priority_level: 2 }", fake
    )
    order: list[int] = []

    async def tracked(value: int, priority: int) -> None:
        await b.execute(job(value), priority=priority)
        order.append(value)

    async def go() -> None:
        first = asyncio.create_task(tracked(0, 0))
        await asyncio.sleep(0.01)
        low = [asyncio.create_task(tracked(v, 2)) for v in (1, 2)]
        await asyncio.sleep(0)
        high = asyncio.create_task(tracked(3, 1))
        await asyncio.gather(first, *low, high)

    run(go())
    assert order[0] == 0
    assert order[1] == 3  # the high-priority request overtook the queued low-priority ones


def test_backend_error_fails_its_batch_only() -> None:
    fake = Recorder()
    b, _ = batcher(
        "max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 20000 preferred_batch_size: [ 2 ] }",
        fake,
    )

    async def go() -> None:
        fake.fail_next = True
        results = await asyncio.gather(b.execute(job(1)), b.execute(job(2)), return_exceptions=True)
        assert all(isinstance(r, ValueError) for r in results)
        ok = await asyncio.gather(b.execute(job(3)), b.execute(job(4)))
        assert [r["OUT"][0, 0] for r in ok] == [4, 5]

    run(go())


def test_cancelled_caller_leaves_nothing_queued() -> None:
    fake = Recorder(delay=0.05)
    b, _ = batcher("max_batch_size: 1 dynamic_batching { }", fake)

    async def go() -> None:
        running = asyncio.create_task(b.execute(job(0)))
        await asyncio.sleep(0.01)
        waiting = asyncio.create_task(b.execute(job(1)))
        await asyncio.sleep(0.01)
        assert b.queued() == 1
        waiting.cancel()
        await asyncio.sleep(0)
        assert b.queued() == 0
        await running
        assert (await b.execute(job(5)))["OUT"][0, 0] == 6

    run(go())
    assert fake.batches == [1, 1]


def test_preserve_ordering_answers_in_arrival_order() -> None:
    slow, fast = Recorder("slow", delay=0.08), Recorder("fast")
    b, _ = batcher("max_batch_size: 1 dynamic_batching { preserve_ordering: true }", slow, fast)
    finished: list[int] = []

    async def tracked(value: int) -> None:
        await b.execute(job(value))
        finished.append(value)

    async def go() -> None:
        await asyncio.gather(*(tracked(i) for i in range(4)))

    run(go())
    assert finished == [0, 1, 2, 3]


def test_preserve_ordering_records_how_long_a_finished_answer_was_held() -> None:
    # The trace's INFER_RESPONSE_COMPLETE is when the answer leaves (Triton's L0_batcher verify_timestamps).
    slow, fast = Recorder("slow", delay=0.08), Recorder("fast")
    b, _ = batcher("max_batch_size: 1 dynamic_batching { preserve_ordering: true }", slow, fast)
    jobs = [job(i) for i in range(2)]

    async def go() -> None:
        first = asyncio.create_task(b.execute(jobs[0]))
        await asyncio.sleep(0.01)  # the first is on the slow instance
        await asyncio.gather(first, b.execute(jobs[1]))

    run(go())
    assert jobs[0].timing.held_ns == 0  # answered as soon as it finished
    assert jobs[1].timing.held_ns > 0  # finished first on the fast instance, then waited for the first


def test_delay_scheduler_env_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "3")
    fake = Recorder()
    b, _ = batcher("max_batch_size: 8 dynamic_batching { }", fake)

    async def go() -> None:
        first = asyncio.create_task(b.execute(job(0)))
        await asyncio.sleep(0.05)
        assert not first.done()  # held until three requests are queued
        await asyncio.gather(first, b.execute(job(1)), b.execute(job(2)))

    run(go())
    assert fake.batches == [3]


# -- when a batch goes without waiting out the delay (Triton's GetDynamicBatch) --------------------------------
# The delay is ten minutes: a batch that goes at all went without waiting it out. Each test waits at most `SOON`
# for what must go at once, far past any execution on a loaded machine and far short of the delay.

NEVER_US = 600_000_000
SOON = 60.0
PREFERRED_2_6 = (
    f"max_batch_size: 8 dynamic_batching {{ max_queue_delay_microseconds: {NEVER_US} "
    "preferred_batch_size: [ 2, 6 ] }"
)


async def until_queued(b: DynamicBatcher, count: int) -> None:
    for _ in range(int(SOON * 1000)):
        if b.queued() == count:
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"never {count} queued")


def test_a_request_larger_than_the_largest_preferred_size_goes_at_once() -> None:
    # Triton's L0_batcher test_static_batch_gt_max_preferred
    fake = Recorder()
    b, stats = batcher(PREFERRED_2_6, fake)

    async def go() -> None:
        await asyncio.wait_for(b.execute(job(1, rows=7)), SOON)

    run(go())
    assert fake.batches == [7]
    assert stats.batches[7].compute_infer.count == 1


def test_a_request_that_would_pass_the_largest_preferred_size_sends_the_pending_batch() -> None:
    # Triton's test_multi_batch_gt_max_preferred: 3 rows wait; 7 more would pass 6 (and 8): both go at once.
    fake = Recorder()
    b, _ = batcher(PREFERRED_2_6, fake)

    async def go() -> None:
        first = asyncio.create_task(b.execute(job(1, rows=3)))
        await until_queued(b, 1)
        second = asyncio.create_task(b.execute(job(2, rows=7)))
        await asyncio.wait_for(asyncio.gather(first, second), SOON)

    run(go())
    assert fake.batches == [3, 7]


def test_rows_past_the_largest_preferred_size_send_what_fits_and_the_rest_waits() -> None:
    # Triton's test_multi_batch_sum_gt_max_preferred: 3 + 4 rows fit max_batch_size 8 but pass 6: the 3 go at
    # once, and the 4, alone under every preferred size, wait for the delay.
    fake = Recorder()
    b, _ = batcher(PREFERRED_2_6, fake)

    async def go() -> None:
        first = asyncio.create_task(b.execute(job(1, rows=3)))
        await until_queued(b, 1)
        second = asyncio.create_task(b.execute(job(2, rows=4)))
        await asyncio.wait_for(first, SOON)
        assert not second.done() and b.queued() == 1
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second

    run(go())
    assert fake.batches == [3]


def test_a_request_with_other_inputs_sends_the_pending_batch_and_is_not_skipped() -> None:
    # Triton's L0_optional_input test_optional_mix_inputs: requests alternate between two sets of (optional)
    # inputs; each one sends the batch before it at once, and nothing behind it joins that batch.
    fake = Recorder()
    b, _ = batcher(f"max_batch_size: 4 dynamic_batching {{ max_queue_delay_microseconds: {NEVER_US} }}", fake)

    def mixed(value: int, extra: bool) -> Job:
        inputs = job(value).inputs
        if extra:
            inputs["EXTRA"] = np.zeros((1, 1), dtype=np.float32)
        return Job(inputs, ["OUT"], 1)

    async def go() -> None:
        tasks: list[asyncio.Task[Arrays]] = []
        for value in range(4):
            tasks.append(asyncio.create_task(b.execute(mixed(value, extra=value % 2 == 1))))
            if value:
                answer = await asyncio.wait_for(tasks[value - 1], SOON)
                assert answer["OUT"][0, 0] == value  # OUT = IN + 1 of the request before
            await until_queued(b, 1)
        last = tasks[-1]
        assert not last.done()  # alone, it waits for the delay
        last.cancel()
        with pytest.raises(asyncio.CancelledError):
            await last

    run(go())
    assert fake.batches == [1, 1, 1]


def test_past_the_delay_the_pending_requests_go_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    # Triton's L0_batcher test_multi_batch_delayed_use_max_batch: 3 and 4 rows held (the delay hook) past the queue
    # delay, then 1 more: one batch of 8, not the 3 rows that fit under the largest preferred size first.
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "3")
    fake = Recorder()
    b, _ = batcher(
        "max_batch_size: 8 dynamic_batching { preferred_batch_size: [2, 6] max_queue_delay_microseconds: 1 }",
        fake,
    )

    async def go() -> None:
        held = [asyncio.create_task(b.execute(job(v, rows=r))) for v, r in ((1, 3), (2, 4))]
        while b.queued() < 2:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.01)  # far past the 1 us delay
        await asyncio.gather(*held, b.execute(job(3, rows=1)))

    run(go())
    assert fake.batches == [8]


class RequestLevel:
    """A request-level instance (as a python model's stub): answers each request at once, records the batches."""

    def __init__(self) -> None:
        self.name = "requests"
        self.batches: list[list[tuple[int, ...]]] = []

    def submit(self, jobs: list[Job], done: Any) -> None:
        self.batches.append([tuple(j.inputs["IN"].shape) for j in jobs])
        done([{"OUT": j.inputs["IN"]} for j in jobs])

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("ragged", "batches"), [(True, [[(1, 16), (1, 8)]]), (False, [[(1, 16)], [(1, 8)]])])
def test_a_ragged_input_lets_other_shapes_share_a_python_models_batch(
    monkeypatch: pytest.MonkeyPatch, ragged: bool, batches: list[list[tuple[int, ...]]]
) -> None:
    # Triton's L0_batcher test_multi_batch_different_shape_allow_ragged: with allow_ragged_batch on the input,
    # requests of different shapes form one batch; without it they do not.
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "2")
    fake = RequestLevel()
    config = text_format.Parse(
        f'max_batch_size: 8 input [ {{ name: "IN" allow_ragged_batch: {str(ragged).lower()} }} ] '
        "dynamic_batching { max_queue_delay_microseconds: 100000 }",
        ModelConfig(),
    )
    b = DynamicBatcher(InstancePool([fake]), config, ModelStats("m", "1"))  # type: ignore[list-item]

    async def go() -> None:
        await asyncio.gather(b.execute(job(1, width=16)), b.execute(job(2, width=8)))

    run(go())
    assert fake.batches == batches


class HeldPipeline:
    """A request-level instance that takes a next job while it runs one (as a python stub), answering only when
    the test says so."""

    pipeline_depth = 2

    def __init__(self) -> None:
        self.name = "held"
        self.calls: list[tuple[list[Job], Any]] = []

    def submit(self, jobs: list[Job], done: Any) -> None:
        self.calls.append((jobs, done))

    def close(self) -> None:
        pass


def test_a_queue_timeout_rejects_a_request_while_a_python_instance_is_busy() -> None:
    # Triton's L0_batcher queue_timeout_test: the queued request is rejected on time, not handed ahead to the busy
    # instance's pipeline where no timeout reaches it.
    fake = HeldPipeline()
    config = text_format.Parse(
        "max_batch_size: 1 dynamic_batching { default_queue_policy { timeout_action: REJECT "
        "default_timeout_microseconds: 50000 } }",
        ModelConfig(),
    )
    b = DynamicBatcher(InstancePool([fake]), config, ModelStats("m", "1"))  # type: ignore[list-item]

    async def go() -> None:
        first = asyncio.create_task(b.execute(job(1)))
        while not fake.calls:
            await asyncio.sleep(0.001)
        with pytest.raises(Rejected, match="Request timeout expired"):
            await asyncio.wait_for(b.execute(job(2)), 60)  # without the fix it would wait forever
        assert len(fake.calls) == 1  # the second never reached the instance
        jobs, done = fake.calls[0]
        done([{"OUT": jobs[0].inputs["IN"]}])
        await first

    run(go())


def test_requests_wait_for_a_busy_python_instance_and_go_as_one_batch() -> None:
    # As Triton (L0_batcher test_max_queue_delay_only_*): while the instance runs a batch, the next requests wait
    # in the queue (not handed ahead to its pipeline) and then go together.
    fake = HeldPipeline()
    config = text_format.Parse("max_batch_size: 8 dynamic_batching { }", ModelConfig())
    b = DynamicBatcher(InstancePool([fake]), config, ModelStats("m", "1"))  # type: ignore[list-item]

    async def go() -> None:
        first = asyncio.create_task(b.execute(job(1)))
        while not fake.calls:
            await asyncio.sleep(0.001)
        rest = [asyncio.create_task(b.execute(job(v))) for v in (2, 3, 4)]
        while b.queued() < 3:
            await asyncio.sleep(0.001)
        assert len(fake.calls) == 1  # nothing handed ahead while the first runs
        jobs, done = fake.calls[0]
        done([{"OUT": j.inputs["IN"]} for j in jobs])
        await first
        while len(fake.calls) < 2:
            await asyncio.sleep(0.001)
        jobs, done = fake.calls[1]
        assert len(jobs) == 3
        done([{"OUT": j.inputs["IN"]} for j in jobs])
        await asyncio.gather(*rest)

    run(go())
