"""table.py: the lookups (Triton's messages when no version serves a request, readiness, busy versions), and
taking versions out of service: `unload` at once, `retire` closing each once its requests are answered."""

from __future__ import annotations

import asyncio
import logging
import tempfile
from pathlib import Path

import pytest

from engine.registry.registry_fakes import FakeModel, entry, fake, ready
from modelhost.engine.registry.entries import UNLOADED, ModelEntry, ModelState, VersionEntry
from modelhost.engine.registry.table import ModelTable
from modelhost.errors import InvalidArgument, NotFound, Unavailable


def table_of(*entries: ModelEntry) -> ModelTable:
    table = ModelTable()
    table.models.update((e.name, e) for e in entries)
    return table


# -- get: the version that serves a request ------------------------------------------------------------------


def test_get_names_an_unknown_model_and_an_unknown_version() -> None:
    table = table_of(ready("m", 1))
    with pytest.raises(NotFound, match=r"^Request for unknown model: 'x' is not found$"):
        table.get("x")
    with pytest.raises(NotFound, match=r"^Request for unknown model: 'm' version 2 is not found$"):
        table.get("m", "2")
    with pytest.raises(NotFound, match=r"^Request for unknown model: 'm' version v1 is not found$"):
        table.get("m", "v1")


def test_get_refuses_a_version_that_is_not_ready() -> None:
    table = table_of(entry("m", (1, ModelState.LOADING, None), (2, ModelState.UNLOADING, FakeModel("m", 2))))
    for version in ("1", "2"):
        with pytest.raises(Unavailable) as refused:
            table.get("m", version)
        assert str(refused.value) == f"Request for unknown model: 'm' version {version} is not at ready state"


def test_get_without_a_version_takes_the_newest_ready_one() -> None:
    one, three = FakeModel("m", 1), FakeModel("m", 3)
    table = table_of(
        entry(
            "m",
            (1, ModelState.READY, one),
            (3, ModelState.READY, three),
            (4, ModelState.UNLOADING, FakeModel("m", 4)),
            (5, ModelState.UNAVAILABLE, None),
        )
    )
    assert table.get("m") is three  # type: ignore[comparison-overlap]
    assert table.get("m", "1") is one  # type: ignore[comparison-overlap]


def test_get_with_no_version_serving() -> None:
    table = table_of(entry("m", (1, ModelState.UNLOADING, FakeModel()), (2, ModelState.READY, None)))
    with pytest.raises(NotFound, match=r"^Request for unknown model: 'm' has no available versions$"):
        table.get("m")


def test_get_refuses_a_name_several_repositories_hold() -> None:
    table = table_of(ready("/a/m"), ready("/b/m"))
    table.ambiguous["m"] = ["/a/m", "/b/m"]
    with pytest.raises(InvalidArgument) as refused:
        table.get("m")
    assert str(refused.value) == (
        "There are 2 identifiers of model 'm' in global map, model namespace must be provided to resolve "
        "ambiguity."
    )
    assert table.get("/b/m") is fake(table.models["/b/m"])  # type: ignore[comparison-overlap]


# -- readiness and what is loaded ----------------------------------------------------------------------------


def test_ready_versions_and_models_in_order() -> None:
    b = entry("b", (2, ModelState.READY, FakeModel("b", 2)), (1, ModelState.READY, FakeModel("b", 1)))
    a = entry("a", (1, ModelState.UNAVAILABLE, None), (3, ModelState.READY, FakeModel("a", 3)))
    table = table_of(b, a)
    assert table.ready_versions("b") == ["1", "2"]
    assert table.ready_versions("a") == ["3"]
    assert table.ready_versions("gone") == []
    assert [(m.name, m.version) for m in table.ready_models()] == [("a", 3), ("b", 1), ("b", 2)]


def test_all_ready_leaves_out_versions_unloaded_on_purpose() -> None:
    unloaded = VersionEntry(2, ModelState.UNAVAILABLE, UNLOADED)
    m = entry("m", (1, ModelState.READY, FakeModel()), (3, ModelState.UNLOADING, FakeModel("m", 3)))
    m.versions[2] = unloaded
    table = table_of(m)
    assert table.all_ready()
    unloaded.reason = "failed to load the model file"
    assert not table.all_ready()
    unloaded.state, unloaded.reason = ModelState.LOADING, ""
    assert not table.all_ready()


def test_all_ready_is_false_for_a_model_that_failed_before_its_versions() -> None:
    table = table_of(ready("m"), entry("bad", error="failed to parse the config"))
    assert not table.all_ready()


def test_busy_versions_are_those_with_requests_in_flight() -> None:
    idle, busy = FakeModel("m", 1), FakeModel("m", 2)
    busy.in_flight = 3
    table = table_of(entry("m", (1, ModelState.READY, idle), (2, ModelState.UNLOADING, busy)))
    assert table.busy_versions() == [("m", 2, 3)]


def test_one_lock_per_model() -> None:
    table = ModelTable()
    assert table.lock("a") is table.lock("a")
    assert table.lock("a") is not table.lock("b")


# -- unload and retire ---------------------------------------------------------------------------------------


def test_an_unloaded_version_closes_once_its_requests_are_answered(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="modelhost.registry")
    m = ready("m")
    loaded = fake(m)
    loaded.in_flight = 1
    table = table_of(m)

    async def run() -> None:
        task = table.unload(m)
        assert task is not None and task in table.retiring
        assert m.versions[1].state == ModelState.UNLOADING
        assert not await table.settled(timeout=0.05)  # a request is still being answered
        assert loaded.closed == 0 and m.versions[1].state == ModelState.UNLOADING
        loaded.answer()
        assert await table.settled()
        assert not table.retiring

    asyncio.run(run())
    assert loaded.closed == 1
    assert (m.versions[1].state, m.versions[1].reason, m.versions[1].model) == (
        ModelState.UNAVAILABLE,
        UNLOADED,
        None,
    )
    assert "successfully unloaded 'm' version 1" in caplog.messages


def test_unload_marks_versions_not_serving_unloaded_at_once() -> None:
    m = entry("m", (1, ModelState.LOADING, None), (2, ModelState.UNAVAILABLE, None))
    m.versions[2].reason = "the model file is broken"
    m.overridden, m.retained = True, ("{}", ((), None))

    async def run() -> None:
        assert table_of(m).unload(m) is None  # nothing to close

    asyncio.run(run())
    assert [(v.state, v.reason) for v in m.versions.values()] == [(ModelState.UNAVAILABLE, UNLOADED)] * 2
    assert not m.overridden and m.retained is None


def test_unloading_a_model_that_failed_clears_its_error() -> None:
    bad = entry("bad", (1, ModelState.UNAVAILABLE, None), error="failed to parse the config")

    async def run() -> None:
        table_of(bad).unload(bad)

    asyncio.run(run())
    assert bad.error == "" and bad.versions == {}


def test_unload_notes_why_the_server_evicted_a_model_and_clears_the_note_otherwise() -> None:
    m = ready("m")
    table = table_of(m)

    async def run() -> None:
        table.unload(m, evicted="unloaded after 5 s idle")
        assert m.evicted == "unloaded after 5 s idle"
        await table.settled()
        table.unload(m)
        assert m.evicted == ""

    asyncio.run(run())


def test_the_override_files_go_once_the_versions_loaded_from_them_close() -> None:
    m = ready("m")
    holder = tempfile.TemporaryDirectory()
    m.override_dir = holder
    loaded = fake(m)
    loaded.in_flight = 1
    table = table_of(m)

    async def run() -> None:
        table.unload(m)
        assert m.override_dir is None
        await asyncio.sleep(0.01)
        assert Path(holder.name).is_dir()  # a request may still read them
        loaded.answer()
        await table.settled()

    asyncio.run(run())
    assert not Path(holder.name).exists()


def test_retire_leaves_alone_a_version_that_replaced_the_retired_one() -> None:
    old, new = FakeModel("m", 1), FakeModel("m", 1)
    m = entry("m", (1, ModelState.READY, new))  # a reload's commit put `new` in place of `old`
    table = table_of(m)

    async def run() -> None:
        table.retire([old], None)  # type: ignore[list-item]
        await table.settled()

    asyncio.run(run())
    assert old.closed == 1 and new.closed == 0
    assert m.versions[1].state == ModelState.READY and m.versions[1].model is new  # type: ignore[comparison-overlap]


def test_a_model_that_fails_to_close_is_logged_and_still_unloaded(caplog: pytest.LogCaptureFixture) -> None:
    class Faulty(FakeModel):
        def close(self) -> None:
            raise RuntimeError("session already closed")

    m = entry("m", (1, ModelState.READY, Faulty("m", 1)))
    table = table_of(m)

    async def run() -> None:
        table.unload(m)
        await table.settled()

    asyncio.run(run())
    assert "failed to close 'm' version 1" in caplog.messages
    assert (m.versions[1].state, m.versions[1].reason) == (ModelState.UNAVAILABLE, UNLOADED)


def test_close_closes_every_loaded_version_at_once() -> None:
    a, b = ready("a", 1, 2), entry("b", (1, ModelState.UNLOADING, FakeModel("b")))
    loaded = [fake(a, 1), fake(a, 2), fake(b)]
    holder = tempfile.TemporaryDirectory()
    a.override_dir = holder
    table_of(a, b).close()
    assert [m.closed for m in loaded] == [1, 1, 1]
    for e in (a, b):
        states = {(v.state, v.reason, v.model) for v in e.versions.values()}
        assert states == {(ModelState.UNAVAILABLE, UNLOADED, None)}
    assert a.override_dir is None and not Path(holder.name).exists()
