"""ensembles.py: steps read from config files, cycles, the order of loads, and the dependents of a model; and
EnsembleGraph: an ensemble's composing models loaded first, the ensembles unloaded with a composing model, and
loaded again once what they need serves."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from engine.registry.registry_fakes import ensemble, entry, model, ready
from modelhost.backends.api import BackendServices
from modelhost.engine.registry.catalog import Catalog, Scanned, steps_in_files
from modelhost.engine.registry.ensembles import EnsembleGraph, dependency_layers, dependents, ensemble_cycle
from modelhost.engine.registry.entries import LoadSettings, ModelEntry, ModelState
from modelhost.engine.registry.table import ModelTable
from modelhost.errors import InvalidArgument, ModelConfigError, ModelhostError, Unavailable
from modelhost.repository.overrides import LoadOverride

GRAPH = {"top": ["mid", "a"], "mid": ["a", "b"], "a": [], "b": []}


def test_layers_load_what_an_ensemble_names_before_it() -> None:
    assert dependency_layers(["top", "mid", "a", "b"], GRAPH.__getitem__) == [["a", "b"], ["mid"], ["top"]]


def test_a_cycle_is_loaded_last_and_named() -> None:
    graph = {"x": ["y"], "y": ["x"], "z": []}
    assert dependency_layers(["x", "y", "z"], graph.__getitem__) == [["z"], ["x", "y"]]
    assert ensemble_cycle("x", ensemble("x", "y"), graph.__getitem__) == ["x", "y", "x"]
    assert ensemble_cycle("top", ensemble("top", "mid", "a"), GRAPH.__getitem__) == []


def test_steps_come_from_the_config_file_alone(tmp_path: Path) -> None:
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "config.pbtxt").write_text(str(ensemble("e", "a", "b")))
    assert steps_in_files([tmp_path / "e"], "e", None) == ["a", "b"]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.pbtxt").write_text("not a config {")
    assert steps_in_files([tmp_path / "bad"], "bad", None) == []  # its own load reports it
    assert steps_in_files([], "gone", None) == []


def test_dependents_are_the_loaded_ensembles_above_a_model() -> None:
    ready = (1, ModelState.READY, model())
    entries = [
        entry("a", ready),
        entry("mid", ready, cfg=ensemble("mid", "a")),
        entry("top", ready, cfg=ensemble("top", "mid")),
        entry("idle", (1, ModelState.UNAVAILABLE, None), cfg=ensemble("idle", "a")),
    ]
    assert sorted(dependents("a", entries)) == ["mid", "top"]
    assert dependents("top", entries) == []


# -- EnsembleGraph -------------------------------------------------------------------------------------------


class Graph:
    """An EnsembleGraph over a table, whose loads (the registry's, stood in for) are recorded: a load puts a
    serving entry of the model in the table (with the config it had there), or fails for the models in
    `failing`."""

    def __init__(self) -> None:
        self.table = ModelTable()
        self.services = BackendServices()
        self.catalog = Catalog([], LoadSettings(), self.table.ambiguous)
        self.graph = EnsembleGraph(self.table, self.catalog, self.services, self.load, self.load_quietly)
        self.loads: list[str] = []
        self.failing: set[str] = set()

    async def load(self, name: str, scanned: Scanned, override: LoadOverride | None) -> None:
        self.loads.append(name)
        if name in self.failing:
            raise InvalidArgument(f"failed to load '{name}': the model file is broken")
        old = self.table.models.get(name)
        self.table.models[name] = ready(name, cfg=old.config if old is not None else None)

    async def load_quietly(self, name: str, scanned: Scanned, override: LoadOverride | None) -> None:
        with contextlib.suppress(ModelhostError):
            await self.load(name, scanned, override)

    def add(self, *entries: ModelEntry) -> None:
        self.table.models.update((e.name, e) for e in entries)


def on_loop(body: Callable[[Graph], Awaitable[None]]) -> Graph:
    """Run `body` with a Graph, on an event loop (the table's locks are the loop's)."""
    graph: list[Graph] = []

    async def main() -> None:
        graph.append(Graph())
        await body(graph[0])

    asyncio.run(main())
    return graph[0]


SCANNED: Scanned = {name: [Path("/repo") / name] for name in ("a", "b", "e")}


def test_the_composing_models_load_first_and_are_marked_as_loaded_for_the_ensemble() -> None:
    async def body(g: Graph) -> None:
        g.add(ready("b"))
        configs = await g.graph.load_composing("e", ensemble("e", "a", "b", "a"), SCANNED)
        assert g.loads == ["a"]  # once; `b` serves already
        assert configs == {"a": g.table.models["a"].config, "b": g.table.models["b"].config}
        assert g.table.models["a"].for_ensemble and not g.table.models["b"].for_ensemble
        assert g.graph.waiting == {}

    on_loop(body)


def test_a_cycle_of_ensembles_fails_in_triton_s_words(tmp_path: Path) -> None:
    for name, step in (("x", "y"), ("y", "x")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.pbtxt").write_text(str(ensemble(name, step)))
    scanned: Scanned = {"x": [tmp_path / "x"], "y": [tmp_path / "y"]}

    async def body(g: Graph) -> None:
        with pytest.raises(ModelConfigError) as failed:
            await g.graph.load_composing("x", ensemble("x", "y"), scanned)
        assert str(failed.value) == "circular dependency between ensembles: x -> ... -> y -> x"
        assert g.loads == []

    on_loop(body)


def test_a_step_in_no_repository_leaves_the_ensemble_waiting_for_it() -> None:
    async def body(g: Graph) -> None:
        with pytest.raises(ModelConfigError) as failed:
            await g.graph.load_composing("e", ensemble("e", "gone"), SCANNED)
        assert str(failed.value) == "ensemble e contains models that are not available or ambiguous: gone"
        assert g.graph.waiting == {"e": "gone"} and g.loads == []

    on_loop(body)


def test_a_step_that_fails_to_load_fails_the_ensemble_with_why() -> None:
    async def body(g: Graph) -> None:
        g.failing.add("a")
        with pytest.raises(ModelConfigError) as failed:
            await g.graph.load_composing("e", ensemble("e", "a"), SCANNED)
        assert str(failed.value) == (
            "ensemble e contains models that are not available or ambiguous: a "
            "(failed to load 'a': the model file is broken)"
        )
        assert g.graph.waiting == {"e": "a"}

    on_loop(body)


def test_a_step_naming_a_version_not_loaded_fails_the_ensemble() -> None:
    config = ensemble("e", "a")
    config.ensemble_scheduling.step[0].model_version = 2

    async def body(g: Graph) -> None:
        g.add(ready("a", 1))
        with pytest.raises(ModelConfigError) as failed:
            await g.graph.load_composing("e", config, SCANNED)
        assert str(failed.value) == "ensemble 'e' depends on 'a' whose required version 2 is not loaded."
        g.add(ready("a", 1, 2))
        assert await g.graph.load_composing("e", config, SCANNED) == {"a": g.table.models["a"].config}

    on_loop(body)


def test_a_step_that_failed_earlier_in_the_startup_is_not_loaded_again() -> None:
    async def body(g: Graph) -> None:
        g.table.started = {"a"}
        g.add(entry("a", error="failed to parse the config"))
        with pytest.raises(ModelConfigError, match=r"^ensemble e contains models that are not available or "):
            await g.graph.load_composing("e", ensemble("e", "a"), SCANNED)
        assert g.loads == []

    on_loop(body)


class Elsewhere:
    """Models another engine serves (`services.external_models`)."""

    def __init__(self, refusal: str = "") -> None:
        self.refusal = refusal
        self.asked: list[tuple[str, set[int]]] = []

    def serves(self, name: str) -> bool:
        return name == "a"

    async def config(self, name: str, versions: set[int]) -> Any:
        self.asked.append((name, versions))
        if self.refusal:
            raise Unavailable(self.refusal)
        return ready(name).config


def test_a_step_served_elsewhere_loads_nothing_here() -> None:
    async def body(g: Graph) -> None:
        g.services.external_models = elsewhere = Elsewhere()  # type: ignore[assignment]
        configs = await g.graph.load_composing("e", ensemble("e", "a", "b"), SCANNED)
        assert elsewhere.asked == [("a", {-1})] and configs["a"].name == "a"
        assert g.loads == ["b"] and "a" not in g.table.models
        g.services.external_models = Elsewhere("application 'a' is deploy_failed")  # type: ignore[assignment]
        with pytest.raises(ModelConfigError) as failed:
            await g.graph.load_composing("e", ensemble("e", "a"), SCANNED)
        assert str(failed.value) == (
            "ensemble e contains models that are not available or ambiguous: a "
            "(application 'a' is deploy_failed)"
        )

    on_loop(body)


def test_unloading_a_composing_model_unloads_the_ensembles_above_it(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="modelhost.registry")

    async def body(g: Graph) -> None:
        a = ready("a")
        g.add(a, ready("mid", cfg=ensemble("mid", "a")), ready("top", cfg=ensemble("top", "mid")), ready("b"))
        g.table.unload(a)
        await g.graph.unload_dependents("a")
        states = {name: e.versions[1].state for name, e in g.table.models.items()}
        assert states == {
            "a": ModelState.UNLOADING,
            "mid": ModelState.UNLOADING,
            "top": ModelState.UNLOADING,
            "b": ModelState.READY,
        }
        assert g.graph.orphans == {"mid", "top"}
        await g.table.settled()

    on_loop(body)
    assert "unloading ensemble 'mid': its composing model 'a' is unloaded" in caplog.messages


def test_orphans_load_again_once_their_steps_serve() -> None:
    async def body(g: Graph) -> None:
        g.add(entry("a", (1, ModelState.UNAVAILABLE, None)))
        g.add(entry("mid", (1, ModelState.UNAVAILABLE, None), cfg=ensemble("mid", "a")))
        g.add(entry("top", (1, ModelState.UNAVAILABLE, None), cfg=ensemble("top", "mid")))
        g.graph.orphans.update({"mid", "top"})
        await g.graph.reload_orphans()
        assert g.loads == [] and g.graph.orphans == {"mid", "top"}  # `a` does not serve
        g.add(ready("a"))
        await g.graph.reload_orphans()
        assert g.loads == ["mid", "top"] and g.graph.orphans == set()  # in order: `top` needs `mid`

    on_loop(body)


def test_an_ensemble_waiting_for_a_step_loads_once_it_serves() -> None:
    async def body(g: Graph) -> None:
        g.graph.waiting["e"] = "a"
        await g.graph.reload_orphans()
        assert g.loads == [] and g.graph.waiting == {"e": "a"}
        g.add(ready("a"))
        await g.graph.reload_orphans()
        assert g.loads == ["e"] and g.graph.waiting == {}

    on_loop(body)


def test_an_ensemble_unloaded_on_request_is_not_loaded_again_on_its_own() -> None:
    async def body(g: Graph) -> None:
        g.add(ready("a"), entry("e", (1, ModelState.UNAVAILABLE, None), cfg=ensemble("e", "a")))
        g.graph.orphans.add("e")
        g.graph.waiting["f"] = "a"
        g.graph.forget("e")
        g.graph.forget("f")
        await g.graph.reload_orphans()
        assert g.loads == [] and g.graph.orphans == set() and g.graph.waiting == {}

    on_loop(body)


def test_a_startup_loads_the_composing_models_of_the_repository_first(tmp_path: Path) -> None:
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "config.pbtxt").write_text(str(ensemble("e", "a")))
    scanned: Scanned = {"e": [tmp_path / "e"], "a": [tmp_path / "a"], "b": [tmp_path / "b"]}
    assert Graph().graph.layers(["e", "a", "b"], scanned) == [["a", "b"], ["e"]]
