"""budget.py: bytes in use, what unloading gives back, whether a load fits, least recently used first; and
MemoryBudget: which models may be unloaded, making room for a load, unloading idle models."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import cast

import pytest

from engine.registry.registry_fakes import FakeModel, ensemble, entry, fake, model, ready
from modelhost.engine.model import LoadedModel
from modelhost.engine.registry.budget import (
    MemoryBudget,
    check_fits,
    last_used_ms,
    memory_in_use,
    serving_bytes,
)
from modelhost.engine.registry.entries import UNLOADED, ControlMode, ModelEntry, ModelState
from modelhost.engine.registry.table import ModelTable
from modelhost.errors import OutOfMemory


def test_memory_counts_every_version_held_and_serving_bytes_only_those_serving() -> None:
    a = entry("a", (1, ModelState.READY, model(100)), (2, ModelState.UNLOADING, model(30)))
    b = entry("b", (1, ModelState.READY, model(50)))
    assert memory_in_use([a, b]) == 180
    assert memory_in_use([a, b], besides="a") == 50
    assert serving_bytes([a, b]) == 150  # a closing version's memory is not given back by unloading its model


def test_a_load_that_does_not_fit_says_why() -> None:
    check_fits("m", 1, 40, "takes", kept=60, budget=100)
    with pytest.raises(OutOfMemory) as refused:
        check_fits("m", 2, 41, "needs at least", kept=60, budget=100)
    assert str(refused.value).startswith(
        "model 'm' version 2 needs at least 41 bytes of memory and does not fit in "
        "--model-memory-budget=100: 60 bytes are taken"
    )


def test_least_recently_used_is_the_last_request_or_the_load() -> None:
    used = entry("used", (1, ModelState.READY, model(last_ms=500, loaded_ms=100)))
    fresh = entry("fresh", (1, ModelState.READY, model(last_ms=0, loaded_ms=900)))
    idle = entry("idle", (1, ModelState.READY, model(last_ms=0, loaded_ms=200)))
    assert min([used, fresh, idle], key=last_used_ms).name == "idle"
    assert last_used_ms(entry("none")) == 0


# -- MemoryBudget: which models may go, making room, idle models ---------------------------------------------


def budget_over(*entries: ModelEntry, limit: int = 100, mode: ControlMode = "explicit") -> MemoryBudget:
    table = ModelTable()
    table.models.update((e.name, e) for e in entries)
    return MemoryBudget(limit, table, mode)


def built(memory: int) -> Callable[[], Awaitable[LoadedModel]]:
    """A build that makes a version taking `memory` bytes."""

    async def build() -> LoadedModel:
        return cast(LoadedModel, FakeModel("new", 1, memory))

    return build


EVICTED = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: "  # when, in UTC


def test_only_idle_models_loaded_in_explicit_mode_and_not_pinned_may_be_unloaded() -> None:
    idle, pinned, busy = ready("idle"), ready("pinned"), ready("busy")
    fake(busy).in_flight = 1
    failed = entry("failed", (1, ModelState.UNAVAILABLE, None))
    budget = budget_over(idle, pinned, busy, failed)
    budget.pinned.add("pinned")
    assert budget.unloadable(idle, "")
    assert not budget.unloadable(idle, "idle")  # the model being loaded
    assert [e.name for e in budget.table.models.values() if budget.unloadable(e, "")] == ["idle"]
    for mode in ("none", "poll"):
        assert not budget_over(idle, mode=mode).unloadable(idle, "")


def test_a_model_being_loaded_or_unloaded_may_not_be_unloaded() -> None:
    m = ready("m")
    budget = budget_over(m)

    async def run() -> None:
        async with budget.table.lock("m"):
            assert not budget.unloadable(m, "")
        assert budget.unloadable(m, "")

    asyncio.run(run())


def test_an_ensemble_and_the_models_a_loaded_ensemble_uses_may_not_be_unloaded() -> None:
    a, b = ready("a"), ready("b")
    e = ready("e", cfg=ensemble("e", "a"))
    stopped = entry("stopped", (1, ModelState.UNAVAILABLE, None), cfg=ensemble("stopped", "b"))
    budget = budget_over(a, b, e, stopped)
    assert not budget.unloadable(e, "")
    assert not budget.unloadable(a, "")
    assert budget.unloadable(b, "")  # the ensemble naming it does not serve


def test_room_is_made_least_recently_used_first(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="modelhost.registry")
    recent, oldest = ready("recent", memory=40, last_ms=300), ready("oldest", memory=40, last_ms=100)
    older = ready("older", memory=10, last_ms=200)
    evicted = fake(oldest)
    budget = budget_over(recent, oldest, older)
    budget.last_size["new"] = 30  # what it took last time

    async def run() -> None:
        model = await budget.fit("new", 1, Path("/nowhere"), built(30))
        assert model.stats.memory_bytes == 30 and budget.last_size["new"] == 30

    asyncio.run(run())
    assert evicted.closed == 1
    assert (oldest.versions[1].state, oldest.versions[1].reason) == (ModelState.UNAVAILABLE, UNLOADED)
    assert re.match(EVICTED + "unloaded to make room for 'new' under --model-memory-budget$", oldest.evicted)
    assert recent.serving() and older.serving()  # 50 + 30 fit in 100
    assert (
        "unloading 'oldest' (40 bytes, least recently used) to make room for 'new' under "
        "--model-memory-budget=100" in caplog.messages
    )


def test_the_first_estimate_is_what_the_version_s_files_take(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.bin").write_bytes(bytes(60))
    idle = ready("idle", memory=50)
    budget = budget_over(idle)

    async def run() -> None:
        async def build() -> LoadedModel:
            assert not idle.serving()  # room was made before the build
            return cast(LoadedModel, FakeModel("new", 1, 10))

        await budget.fit("new", 1, tmp_path, build)

    asyncio.run(run())
    assert budget.last_size["new"] == 10


def test_a_load_that_cannot_fit_beside_what_may_not_go_fails_before_anything_goes() -> None:
    pinned, busy, used = ready("pinned", memory=30), ready("busy", memory=30), ready("used", memory=20)
    fake(busy).in_flight = 1
    idle = ready("idle", memory=15)
    budget = budget_over(pinned, busy, used, ready("e", cfg=ensemble("e", "used")), idle)
    budget.pinned.add("pinned")
    budget.last_size["new"] = 30

    async def never() -> LoadedModel:
        raise AssertionError("built, though it could not fit")

    async def run() -> None:
        with pytest.raises(OutOfMemory) as refused:
            await budget.fit("new", 1, Path("/nowhere"), never)
        assert str(refused.value) == (
            "model 'new' version 1 needs at least 30 bytes of memory and does not fit in "
            "--model-memory-budget=100: 80 bytes are taken by models that cannot be unloaded (pinned with "
            "--load-model, in use, or used by a loaded ensemble)"
        )

    asyncio.run(run())
    assert idle.serving() and fake(idle).closed == 0


def test_a_version_that_takes_more_than_fits_is_closed() -> None:
    budget = budget_over(ready("pinned", memory=50))
    budget.pinned.add("pinned")
    budget.last_size["new"] = 10
    taken: list[FakeModel] = []

    async def build() -> LoadedModel:
        taken.append(FakeModel("new", 1, 60))
        return cast(LoadedModel, taken[0])

    async def run() -> None:
        with pytest.raises(OutOfMemory, match=r"^model 'new' version 1 takes 60 bytes of memory and does"):
            await budget.fit("new", 1, Path("/nowhere"), build)

    asyncio.run(run())
    assert taken[0].closed == 1 and budget.last_size["new"] == 60


def test_a_reload_does_not_count_the_versions_it_replaces() -> None:
    m, other = ready("m", memory=90), ready("other", memory=5)
    budget = budget_over(m, other)
    budget.last_size["m"] = 90

    async def run() -> None:
        await budget.fit("m", 2, Path("/nowhere"), built(90))

    asyncio.run(run())
    assert m.serving() and other.serving()  # 5 + 90 fit: nothing unloaded


def test_idle_models_are_unloaded_after_idle_s() -> None:
    now_ms = int(time.time() * 1000)
    stale, pinned = ready("stale", last_ms=now_ms - 60_000), ready("pinned", last_ms=now_ms - 60_000)
    fresh = ready("fresh", last_ms=now_ms)
    budget = budget_over(stale, fresh, pinned)
    budget.pinned.add("pinned")

    async def run() -> None:
        assert await budget.unload_idle(30) == ["stale"]

    asyncio.run(run())
    assert not stale.serving() and fresh.serving() and pinned.serving()
    assert re.match(EVICTED + r"unloaded after 30 s idle \(--model-idle-unload-secs\)$", stale.evicted)
