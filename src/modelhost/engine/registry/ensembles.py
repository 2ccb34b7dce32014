"""Ensembles in the registry: the graph of models that ensembles' steps name (cycles, the order a startup loads
models in, the loaded ensembles that depend on a model), and the loads and unloads it brings about."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from modelhost.backends.api import BackendServices
from modelhost.config.normalize import is_ensemble
from modelhost.engine.registry.catalog import Catalog, Scanned
from modelhost.engine.registry.entries import ModelEntry
from modelhost.engine.registry.table import ModelTable
from modelhost.errors import ModelConfigError, ModelhostError
from modelhost.repository.overrides import LoadOverride

log = logging.getLogger("modelhost.registry")

StepsOf = Callable[[str], list[str]]
# A model's load by key, with the directories scanned and an optional override.
Load = Callable[[str, Scanned, LoadOverride | None], Awaitable[None]]


def ensemble_cycle(name: str, config: Any, steps_of: StepsOf) -> list[str]:
    """The names along a cycle through `name` of ensembles naming each other, or []."""

    def walk(model: str, steps: list[str], path: list[str]) -> list[str]:
        for step in steps:
            if step == name:
                return [*path, model, step]
            if step not in path and step != model:
                found = walk(step, steps_of(step), [*path, model])
                if found:
                    return found
        return []

    return walk(name, [s.model_name for s in config.ensemble_scheduling.step], [])


def dependency_layers(names: list[str], steps_of: StepsOf) -> list[list[str]]:
    """`names` in layers: those naming no other model of `names` first, then those whose steps are all in
    earlier layers, and so on (what is left, on a cycle, last: its load reports the cycle)."""
    steps = {name: set(steps_of(name)) & set(names) for name in names}
    layers: list[list[str]] = []
    placed: set[str] = set()
    while len(placed) < len(names):
        layer = [n for n in names if n not in placed and steps[n] <= placed]
        if not layer:
            layer = [n for n in names if n not in placed]
        layers.append(layer)
        placed.update(layer)
    return layers


def dependents(name: str, entries: Iterable[ModelEntry]) -> list[str]:
    """The loaded ensembles with a step naming `name`, and those naming them, and so on."""
    entries = list(entries)
    found: list[str] = []
    todo = [name]
    while todo:
        current = todo.pop()
        for entry in entries:
            if entry.name in found or not entry.serving() or not is_ensemble(entry.config):
                continue
            if any(s.model_name == current for s in entry.config.ensemble_scheduling.step):
                found.append(entry.name)
                todo.append(entry.name)
    return found


class EnsembleGraph:
    """The registry's ensembles and what they hang on: an ensemble's composing models loaded before it (in every
    mode, as Triton), the ensembles unloaded with a composing model and loaded again once it is back, and those
    that failed for want of one, tried again once it serves."""

    __slots__ = ("_load", "_load_quietly", "catalog", "orphans", "services", "table", "waiting")

    def __init__(
        self, table: ModelTable, catalog: Catalog, services: BackendServices, load: Load, load_quietly: Load
    ) -> None:
        """`load`: a model's load under its lock, raising its failure; `load_quietly`: the same, the failure
        recorded and logged only."""
        self.table = table
        self.catalog = catalog
        self.services = services
        self._load = load
        self._load_quietly = load_quietly
        # Ensembles unloaded because a composing model went: loaded again once all their models serve again.
        self.orphans: set[str] = set()
        # Ensembles that failed to load for want of a composing model: tried again once it serves (as Triton).
        self.waiting: dict[str, str] = {}

    def layers(self, names: list[str], scanned: Scanned) -> list[list[str]]:
        """`names` in the order a startup loads them (dependency_layers)."""
        return dependency_layers(names, lambda name: self.catalog.steps_in_files(name, scanned))

    def dependents(self, name: str) -> list[str]:
        """The loaded ensembles with a step naming `name`, and those naming them, and so on."""
        return dependents(name, self.table.models.values())

    async def load_composing(self, name: str, config: Any, scanned: Scanned) -> dict[str, Any]:
        """Load the models an ensemble's steps name, where not already serving (as Triton does, in every
        mode), and return their configs. A cycle of ensembles fails here rather than waiting on itself."""
        cycle = ensemble_cycle(name, config, lambda model: self.catalog.steps_in_files(model, scanned))
        if cycle:
            # Triton's words: the start, "...", the ensemble whose step names the start, the start again.
            raise ModelConfigError(
                f"circular dependency between ensembles: {name} -> ... -> {cycle[-2]} -> {name}"
            )
        configs: dict[str, Any] = {}
        for step in config.ensemble_scheduling.step:
            dependency = step.model_name
            if dependency not in configs:
                configs[dependency] = await self._composing(name, config, dependency, scanned)
        self.waiting.pop(name, None)
        return configs

    async def _composing(self, name: str, config: Any, dependency: str, scanned: Scanned) -> Any:
        """The config of one composing model, loaded first where it does not serve."""
        # Triton's words when a composing model cannot serve; then why, which Triton leaves to its log.
        unavailable = f"ensemble {name} contains models that are not available or ambiguous: {dependency}"
        required = {s.model_version for s in config.ensemble_scheduling.step if s.model_name == dependency}
        external = self.services.external_models
        if external is not None and external.serves(dependency):
            # Served elsewhere (another deployment of a Ray cluster): its configuration from there, once it
            # serves the versions the steps name; nothing of it loads here.
            try:
                return await external.config(dependency, required)
            except ModelhostError as e:
                raise ModelConfigError(f"{unavailable} ({e})") from e
        self.waiting[name] = dependency  # until it loads (removed once the ensemble's composing models serve)
        if dependency not in scanned and dependency not in self.table.models:
            raise ModelConfigError(unavailable)
        async with self.table.lock(dependency):
            entry = self.table.models.get(dependency)
            started = self.table.started
            if started is not None and dependency in started and (entry is None or not entry.serving()):
                # It failed earlier in this start (and said why): not loaded, nor logged, twice.
                raise ModelConfigError(unavailable)
            if entry is None or not entry.serving():
                try:
                    await self._load(dependency, scanned, None)
                    self.table.models[dependency].for_ensemble = True
                except ModelhostError as e:
                    raise ModelConfigError(f"{unavailable} ({e})") from e
            entry = self.table.models[dependency]
        loaded = {v.version for v in entry.serving()}
        for version in required:
            if version >= 0 and version not in loaded:
                raise ModelConfigError(
                    f"ensemble '{name}' depends on '{dependency}' whose required version {version} is not loaded."
                )
        return entry.config

    async def unload_dependents(self, name: str) -> None:
        """An ensemble cannot serve without its composing models: unloading one unloads the ensembles using it,
        as in Triton (with or without `unload_dependents`), until it is back."""
        for dependent in self.dependents(name):
            async with self.table.lock(dependent):
                entry = self.table.models.get(dependent)
                if entry is not None and entry.serving():
                    log.info("unloading ensemble '%s': its composing model '%s' is unloaded", dependent, name)
                    self.table.unload(entry)
                    self.orphans.add(dependent)

    def forget(self, name: str) -> None:
        """An ensemble unloaded on request: not loaded again on its own."""
        self.orphans.discard(name)
        self.waiting.pop(name, None)

    async def reload_orphans(self) -> None:
        """Load again the ensembles unloaded for a composing model, and those that failed for want of one, once
        what they need serves."""
        for name, dependency in sorted(self.waiting.items()):
            entry = self.table.models.get(dependency)
            if entry is not None and entry.serving():
                del self.waiting[name]
                async with self.table.lock(name):
                    await self._load_quietly(name, self.catalog.scan(), None)
        scanned: Scanned | None = None
        for name in sorted(self.orphans):
            entry = self.table.models.get(name)
            steps = [] if entry is None or entry.config is None else entry.config.ensemble_scheduling.step
            if not all((m := self.table.models.get(s.model_name)) is not None and m.serving() for s in steps):
                continue
            self.orphans.discard(name)
            scanned = self.catalog.scan() if scanned is None else scanned
            async with self.table.lock(name):
                await self._load_quietly(name, scanned, None)
