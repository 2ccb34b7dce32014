"""The rate limiter through the instance pool, with fake instances the test finishes by hand (no timing)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.backends.api import Arrays, Job, JobOutcomes
from modelhost.cli.main import main
from modelhost.cli.serve_args import parse_serve_args
from modelhost.config import parse_config_text
from modelhost.engine.scheduling.dynamic_batcher import DynamicBatcher
from modelhost.engine.scheduling.instances import InstancePool
from modelhost.engine.scheduling.rate_limiter import (
    GLOBAL,
    InstanceNeeds,
    RateLimiter,
    needs_of,
    parse_resource_flag,
)
from modelhost.errors import ModelConfigError, Unavailable
from modelhost.observability.stats import ModelStats
from modelhost.options import ServerOptions


class ManualInstance:
    """A request-level instance whose executions end when the test says so."""

    pipeline_depth = 2  # a python stub's: ignored by a rate-limited pool

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log
        self.running: list[tuple[list[Job], Callable[[JobOutcomes], None]]] = []
        self.closed = False

    def submit(self, jobs: list[Job], done: Callable[[JobOutcomes], None]) -> None:
        self.log.append(self.name)
        self.running.append((jobs, done))

    def finish(self, error: BaseException | None = None) -> None:
        jobs, done = self.running.pop(0)
        done([error if error is not None else {"OUT": j.inputs["IN"] + 1} for j in jobs])

    def close(self) -> None:
        self.closed = True


def job() -> Job:
    return Job({"IN": np.zeros(2, dtype=np.float32)}, ["OUT"], 1)


def needs(resources: dict[tuple[int, str], int], priority: int = 1) -> InstanceNeeds:
    return InstanceNeeds(resources, priority)


def sharing_one_r1(
    first: str = "a", second: str = "b"
) -> tuple[RateLimiter, list[str], tuple[ManualInstance, InstancePool], tuple[ManualInstance, InstancePool]]:
    """Two one-instance models whose instances each need the one copy of R1: (limiter, execution log,
    (instance, pool) of each)."""
    limiter = RateLimiter()
    log: list[str] = []
    a, b = ManualInstance(first, log), ManualInstance(second, log)
    return (
        limiter,
        log,
        (a, InstancePool([a], limiter, [needs({(0, "R1"): 1})])),
        (b, InstancePool([b], limiter, [needs({(0, "R1"): 1})])),
    )


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def running(*instances: ManualInstance) -> int:
    return sum(len(i.running) for i in instances)


def test_a_shared_resource_caps_executions_across_models() -> None:
    async def go() -> None:
        limiter = RateLimiter()
        log: list[str] = []
        a = [ManualInstance(f"a{i}", log) for i in range(2)]
        b = [ManualInstance(f"b{i}", log) for i in range(2)]
        pool_a = InstancePool(a, limiter, [needs({(0, "R1"): 1})] * 2)
        pool_b = InstancePool(b, limiter, [needs({(0, "R1"): 1})] * 2)
        assert limiter.rows() == [("R1", "0", "1")]  # the most any instance asks for
        calls = [asyncio.ensure_future(p.execute(job())) for p in (pool_a, pool_b) for _ in range(3)]
        await settle()
        done = 0
        while done < len(calls):
            assert running(*a, *b) == 1  # four idle instances, one copy of R1
            assert limiter.held((0, "R1")) == 1
            next(i for i in (*a, *b) if i.running).finish()
            done += 1
            await settle()
        assert [c.result()["OUT"].tolist() for c in calls] == [[1.0, 1.0]] * 6
        assert limiter.held((0, "R1")) == 0
        assert {name[0] for name in log} == {"a", "b"}

    asyncio.run(go())


def test_explicit_counts_raise_the_cap() -> None:
    async def go() -> None:
        limiter = RateLimiter([("R1", 2, None)])
        log: list[str] = []
        instances = [ManualInstance(f"i{i}", log) for i in range(3)]
        pool = InstancePool(instances, limiter, [needs({(0, "R1"): 1})] * 3)
        assert limiter.rows() == [("R1", "0", "2")]
        calls = [asyncio.ensure_future(pool.execute(job())) for _ in range(3)]
        await settle()
        assert running(*instances) == 2
        instances[0].finish() if instances[0].running else instances[1].finish()
        await settle()
        assert running(*instances) == 2
        while running(*instances):
            next(i for i in instances if i.running).finish()
            await settle()
        await asyncio.gather(*calls)

    asyncio.run(go())


def test_per_device_resources_are_counted_per_device_and_global_ones_once() -> None:
    async def go(key_of: Callable[[int], tuple[int, str]]) -> int:
        limiter = RateLimiter()
        log: list[str] = []
        instances = [ManualInstance(f"gpu{d}", log) for d in range(2)]
        pool = InstancePool(instances, limiter, [needs({key_of(d): 1}) for d in range(2)])
        calls = [asyncio.ensure_future(pool.execute(job())) for _ in range(2)]
        await settle()
        concurrent = running(*instances)
        while running(*instances):
            next(i for i in instances if i.running).finish()
            await settle()
        await asyncio.gather(*calls)
        return concurrent

    assert asyncio.run(go(lambda device: (device, "R1"))) == 2
    assert asyncio.run(go(lambda device: (GLOBAL, "R1"))) == 1


def test_priority_two_gets_half_the_executions_of_priority_one() -> None:
    async def go() -> list[str]:
        limiter = RateLimiter()
        log: list[str] = []
        fast, slow = ManualInstance("p1", log), ManualInstance("p2", log)
        pool_1 = InstancePool([fast], limiter, [needs({(0, "R1"): 1}, priority=1)])
        pool_2 = InstancePool([slow], limiter, [needs({(0, "R1"): 1}, priority=2)])
        calls = [asyncio.ensure_future(p.execute(job())) for _ in range(20) for p in (pool_1, pool_2)]
        await settle()
        for _ in range(12):
            (fast if fast.running else slow).finish()
            await settle()
        while running(fast, slow):
            (fast if fast.running else slow).finish()
            await settle()
        await asyncio.gather(*calls)
        return log[:12]

    first = asyncio.run(go())
    assert first.count("p1") == 8 and first.count("p2") == 4


def test_a_resource_both_global_and_per_device_fails_the_load() -> None:
    limiter = RateLimiter()
    InstancePool([ManualInstance("a", [])], limiter, [needs({(GLOBAL, "R1"): 1})])
    with pytest.raises(ModelConfigError, match='Resource "R1" is present as both global and device-specific'):
        InstancePool([ManualInstance("b", [])], limiter, [needs({(0, "R1"): 1})])
    assert limiter.rows() == [("R1", "GLOBAL", "1")]  # the failed load left nothing behind


def test_a_request_larger_than_the_explicit_count_fails_the_load() -> None:
    limiter = RateLimiter([("R1", 1, None)])
    with pytest.raises(ModelConfigError, match=r'"R1" is limited to 1 .* minimum required count is 2'):
        InstancePool([ManualInstance("a", [])], limiter, [needs({(0, "R1"): 2})])
    # A global resource takes the largest count given for its name on any device.
    limiter = RateLimiter([("G", 1, 0), ("G", 3, 1)])
    InstancePool([ManualInstance("a", [])], limiter, [needs({(GLOBAL, "G"): 3})])
    assert limiter.rows() == [("G", "GLOBAL", "3")]


def test_unloading_a_model_gives_back_its_default_counts() -> None:
    limiter = RateLimiter()
    small = InstancePool([ManualInstance("s", [])], limiter, [needs({(0, "R1"): 1})])
    big = InstancePool([ManualInstance("b", [])], limiter, [needs({(0, "R1"): 4})])
    assert limiter.rows() == [("R1", "0", "4")]
    big.close()
    assert limiter.rows() == [("R1", "0", "1")]
    small.close()
    assert limiter.rows() == []


def test_failures_release_the_resources() -> None:
    async def go() -> None:
        limiter = RateLimiter()
        log: list[str] = []
        instance = ManualInstance("a", log)
        pool = InstancePool([instance], limiter, [needs({(0, "R1"): 1})])
        first = asyncio.ensure_future(pool.execute(job()))
        second = asyncio.ensure_future(pool.execute(job()))
        await settle()
        instance.finish(ValueError("boom"))
        await settle()
        with pytest.raises(ValueError, match="boom"):
            first.result()
        assert limiter.held((0, "R1")) == 1  # the second holds it now
        instance.finish()
        await second
        assert limiter.held((0, "R1")) == 0

    asyncio.run(go())


def test_a_caller_that_goes_away_while_waiting_for_resources_leaves_nothing_held() -> None:
    async def go() -> None:
        limiter, log, (a, pool_a), (b, pool_b) = sharing_one_r1("a", "b")
        running_a = asyncio.ensure_future(pool_a.execute(job()))
        await settle()
        waiting_b = asyncio.ensure_future(pool_b.execute(job()))
        await settle()
        assert log == ["a"]
        waiting_b.cancel()
        await settle()
        a.finish()
        await running_a
        await settle()
        # The job already handed to its instance still runs (as without the limiter), then gives R1 back.
        if b.running:
            b.finish()
            await settle()
        assert limiter.held((0, "R1")) == 0
        again = asyncio.ensure_future(pool_b.execute(job()))
        await settle()
        b.finish()
        await again

    asyncio.run(go())


def test_a_request_waiting_for_resources_fails_when_its_model_is_unloaded() -> None:
    async def go() -> None:
        limiter, _, (a, pool_a), (_, pool_b) = sharing_one_r1("a0", "b0")
        first = asyncio.ensure_future(pool_a.execute(job()))
        await settle()
        waiting = asyncio.ensure_future(pool_b.execute(job()))  # R1 is held by a0
        await settle()
        assert not waiting.done()
        pool_b.close()  # its model unloaded meanwhile
        await settle()
        with pytest.raises(Unavailable, match="was unloaded"):
            await waiting
        a.finish()
        assert (await first)["OUT"].tolist() == [1.0, 1.0]
        assert limiter.held((0, "R1")) == 0

    asyncio.run(go())


def test_acquired_workers_hold_nothing_until_they_start() -> None:
    async def go() -> None:
        limiter, log, (a, pool_a), (b, pool_b) = sharing_one_r1("a", "b")
        # A batcher holds an instance while it forms a batch: the resource stays free meanwhile.
        worker = await pool_a.acquire()
        assert limiter.held((0, "R1")) == 0
        pool_a.release(worker)  # a batch that came to nothing
        pinned = await pool_b.acquire_worker(pool_b.workers[0])  # the sequence batcher's path
        result: asyncio.Future[JobOutcomes] = asyncio.get_running_loop().create_future()
        pool_b.start_jobs(pinned, [job()], result)
        await settle()
        assert limiter.held((0, "R1")) == 1 and log == ["b"]
        other = asyncio.ensure_future(pool_a.execute(job()))
        await settle()
        assert log == ["b"]  # waits for R1
        b.finish()
        await settle()
        assert log == ["b", "a"]
        a.finish()
        await other
        assert len(await result) == 1
        assert limiter.held((0, "R1")) == 0

    asyncio.run(go())


class BlockingInstance:
    """A batch instance (run on its worker thread) that runs until its gate opens."""

    def __init__(self, name: str, started: threading.Semaphore, fail: bool = False) -> None:
        self.name = name
        self.fail = fail
        self.gate = threading.Event()
        self.started = started
        self.active = 0

    def execute(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        self.active += 1
        self.started.release()
        self.gate.wait()
        self.active -= 1
        if self.fail:
            raise ValueError("boom")
        return {"OUT": inputs["IN"] + 1}

    def close(self) -> None:
        self.gate.set()


def test_batch_instances_on_threads_share_a_global_resource() -> None:
    async def go() -> None:
        limiter = RateLimiter()
        started = threading.Semaphore(0)
        instances = [BlockingInstance(f"m{i}", started, fail=i == 0) for i in range(3)]
        pools = [InstancePool([i], limiter, [needs({(GLOBAL, "R"): 1})]) for i in instances]
        calls = [asyncio.ensure_future(p.execute(job())) for p in pools]
        for _ in instances:
            assert await asyncio.to_thread(started.acquire, True, 60)
            active = [i for i in instances if i.active]
            assert len(active) == 1  # one copy of R: one execution at a time, across the three models
            assert limiter.held((GLOBAL, "R")) == 1
            active[0].gate.set()
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert isinstance(results[0], ValueError)  # a failed execution gave R back too
        assert all(isinstance(r, dict) for r in results[1:])
        assert limiter.held((GLOBAL, "R")) == 0
        for pool in pools:
            pool.close()

    asyncio.run(go())


def test_off_or_without_resources_the_pool_never_reaches_the_limiter() -> None:
    limiter = RateLimiter()
    plain = InstancePool([ManualInstance("a", [])], limiter, [needs({})])
    assert plain._limiter is None and len(plain._spares) == 1
    off = InstancePool([ManualInstance("b", [])], None, [needs({(0, "R1"): 1})])
    assert off._limiter is None
    assert limiter.rows() == []


def test_needs_come_from_the_instance_group() -> None:
    config = parse_config_text(
        'name: "m" instance_group { count: 1 kind: KIND_CPU rate_limiter { resources [ { name: "R1" count: 2 }, '
        '{ name: "G" count: 1 global: true } ] priority: 3 } } instance_group { count: 1 kind: KIND_CPU }',
        "m",
        "test",
    )
    assert needs_of(config.instance_group[0], 0) == InstanceNeeds({(0, "R1"): 2, (GLOBAL, "G"): 1}, 3)
    assert needs_of(config.instance_group[1], 0) == InstanceNeeds()


# --- Flags


def test_flags_reach_the_options() -> None:
    options = parse_serve_args(
        ["--rate-limit=EXECUTION_COUNT", "--rate-limit-resource=R1:10", "--rate-limit-resource", "R2:5:1"]
    )
    assert options.rate_limit == "execution_count"
    assert options.rate_limit_resources == [("R1", 10, None), ("R2", 5, 1)]
    assert parse_serve_args(["--rate-limit=off"]) == ServerOptions()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rate-limit=fast"], "--rate-limit must be off or execution_count, got 'fast'"),
        (["--rate-limit-resource=R1"], "--rate-limit-resource option format is"),
        (["--rate-limit-resource=R1:x"], "--rate-limit-resource option format is"),
        (["--rate-limit-resource=R1:1:0:2"], "--rate-limit-resource option format is"),
        (["--rate-limit-resource=:4"], "--rate-limit-resource option format is"),
        (["--rate-limit-resource=R1:-1"], "count must be 0 or more"),
        (["--rate-limit-resource=R1:1:-1"], "device must be 0 or more"),
    ],
)
def test_bad_values_end_the_command(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", *argv]) == 2
    assert message in capsys.readouterr().err


def test_resource_flag_forms() -> None:
    assert parse_resource_flag("R1:4") == ("R1", 4, None)
    assert parse_resource_flag("R1:4:0") == ("R1", 4, 0)
    with pytest.raises(ValueError, match="'<resource_name>:<count>:<device>' or '<resource_name>:<count>'"):
        parse_resource_flag("R1:4:0:1")


def test_dynamic_batchers_of_two_models_take_turns_on_a_shared_resource() -> None:
    async def go() -> None:
        limiter = RateLimiter()
        log: list[str] = []
        a, b = ManualInstance("a", log), ManualInstance("b", log)
        config = text_format.Parse("max_batch_size: 4 dynamic_batching { }", ModelConfig())
        batch_a = DynamicBatcher(
            InstancePool([a], limiter, [needs({(0, "R"): 1})]), config, ModelStats("a", "1")
        )
        batch_b = DynamicBatcher(
            InstancePool([b], limiter, [needs({(0, "R"): 1})]), config, ModelStats("b", "1")
        )
        first = asyncio.ensure_future(batch_a.execute(job()))
        await settle()
        assert log == ["a"]
        # B's requests form a batch while A holds R, and wait for R with it.
        later = [asyncio.ensure_future(batch_b.execute(job())) for _ in range(3)]
        await settle()
        assert log == ["a"] and limiter.held((0, "R")) == 1
        a.finish()
        await first
        await settle()
        assert log == ["a", "b"] and len(b.running[0][0]) == 3  # one batch of three
        b.finish()
        await asyncio.gather(*later)
        assert limiter.held((0, "R")) == 0

    asyncio.run(go())


def test_the_limits_are_logged_at_verbose_after_each_change(caplog: pytest.LogCaptureFixture) -> None:
    # tritonserver's verbose account, which L0_model_update reads: the largest need of every registered instance
    # (or the explicit count), again after instances leave.
    limiter = RateLimiter()
    with caplog.at_level("DEBUG", logger="modelhost.rate_limiter"):
        big = limiter.register([InstanceNeeds({(GLOBAL, "R1"): 4})])
        limiter.register([InstanceNeeds({(GLOBAL, "R1"): 3})])
        limiter.unregister(big)
    maps = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Max Resource Map")]
    assert maps[-1] == "Max Resource Map===>\n\tDevice: GLOBAL\n\t\tResource: R1\t Count: 3\n"
    assert "Count: 4" in maps[0]
