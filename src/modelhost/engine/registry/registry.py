"""The model registry: which models and versions exist, their states, and the loaded versions that serve.

`ModelRegistry` coordinates; each part has one job:

- `table.py`: the table of entries, one lock per model, the lookups (the version that serves a request,
  readiness), and taking versions out of service;
- `catalog.py`: the repositories, their model directories by name, --model-namespacing's keys;
- `loading.py`: one load of one model, in phases (read, choose versions, build, keep or commit);
- `builder.py`: building one version (config, instances, warmup, retries), ensembles, instance updates in place;
- `budget.py`: the memory budget and eviction (least recently used first, idle models);
- `ensembles.py`: the ensemble graph, its composing models and its dependents;
- `views.py`: the repository index and the startup tables.

The registry is only touched from the event loop; blocking work (syncing a remote repository, reading configs,
building runtime sessions, closing them) runs on worker threads. Lifecycle rules, as in Triton: one load or unload
at a time per model (a lock per name), at most --model-load-thread-count loads at once, and no accepted request
fails because of a reload or an unload (loading.py says how).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from modelhost.backends.api import BackendServices
from modelhost.config.normalize import is_ensemble
from modelhost.engine.model import LoadedModel
from modelhost.engine.registry.budget import MemoryBudget
from modelhost.engine.registry.builder import VersionBuilder
from modelhost.engine.registry.catalog import Catalog, Scanned
from modelhost.engine.registry.ensembles import EnsembleGraph
from modelhost.engine.registry.entries import ControlMode, LoadSettings, ModelEntry, display_name
from modelhost.engine.registry.loading import ModelLoad
from modelhost.engine.registry.table import ModelTable
from modelhost.engine.registry.views import backend_rows, index_rows, status_rows
from modelhost.errors import InvalidArgument, ModelhostError, Unavailable
from modelhost.repository.overrides import LoadOverride, check_model_name
from modelhost.repository.sources import RepositoryError, RepositorySource

log = logging.getLogger("modelhost.registry")


class ModelRegistry:
    def __init__(
        self,
        sources: list[RepositorySource],
        settings: LoadSettings,
        mode: ControlMode = "none",
        services: BackendServices | None = None,
    ) -> None:
        """`services`: what backends may use of the running server (python models call other models and export
        metrics; empty in unit tests)."""
        self.settings = settings
        self.mode = mode
        self.services: Final = services if services is not None else BackendServices()
        self.table = ModelTable()
        self.catalog = Catalog(sources, settings, self.table.ambiguous)
        self.budget = MemoryBudget(settings.memory_budget, self.table, mode)
        fitting = self.budget if settings.memory_budget is not None else None
        self.builder = VersionBuilder(settings, self.table, self.services, fitting)
        self.ensembles = EnsembleGraph(self.table, self.catalog, self.services, self._load, self._load_quietly)

    @property
    def models(self) -> dict[str, ModelEntry]:
        return self.table.models

    @property
    def registered(self) -> dict[str, Path]:
        """Models registered by name from a directory outside the repositories (SageMaker's POST /models)."""
        return self.catalog.registered

    def scan(self) -> Scanned:
        return self.catalog.scan()

    # -- startup, polling, load and unload requests -------------------------------------------------------------

    async def start(self, names: Iterable[str] | None = None) -> None:
        """The initial load: every model of the repositories, or those named (explicit mode; '*' = all)."""
        await self.catalog.sync(strict=True)
        scanned = self.catalog.scan()
        wanted = sorted(scanned) if names is None else list(dict.fromkeys(names))
        if "*" in wanted:
            wanted = sorted(scanned)
        wanted = [key for name in wanted for key in self.catalog.keys_of(name)]  # --model-namespacing
        for name in wanted:
            if name not in scanned:  # asked for by --load-model: a startup failure, as in Triton
                self.models[name] = ModelEntry(name, error="model not found in any model repository")
                log.error("failed to load '%s': model not found in any model repository", name)
        wanted = [name for name in wanted if name in scanned]
        if self.mode == "explicit":
            self.budget.pinned.update(wanted)
        # In dependency order, each model once: the models first, then the ensembles using them, layer by layer,
        # so that no ensemble loads a composing model while that model's own load is under way.
        self.table.started = set()
        for layer in self.ensembles.layers(wanted, scanned):
            await asyncio.gather(*(self._load_quietly(name, scanned) for name in layer))
        self.table.started = None
        for name in wanted:  # asked for by name, even where an ensemble loaded it first
            if name in self.models:
                self.models[name].for_ensemble = False

    async def load(self, name: str, override: LoadOverride | None = None) -> None:
        """Load or reload a model (the repository extension's load); raises with the reason when it fails."""
        check_model_name(name)
        if self.settings.namespacing and len(keys := self.catalog.keys_now(name)) > 1:
            for key in keys:  # every repository's model of that name, as Triton loads them
                await self._load_key(key, override)
            if name in self.models:  # loaded while the name was one repository's: the copies replace it
                await self._unload_key(name)
            return
        await self._load_key(name, override)

    async def _load_key(self, name: str, override: LoadOverride | None) -> None:
        async with self.table.lock(name):
            if override is None or not override.files:
                try:
                    await self.catalog.sync(strict=True)
                except RepositoryError as e:
                    raise Unavailable(
                        f"failed to load '{name}': the model repository cannot be read: {e}"
                    ) from e
            await self._load(name, self.catalog.scan(), override)
            if name in self.models:
                self.models[name].for_ensemble = False  # asked for by name
        await self.ensembles.reload_orphans()

    async def unload(self, name: str, *, composing: bool = False) -> None:
        """Stop serving every version of a model; each closes once its in-flight requests are answered. The
        ensembles using it go too. `composing` (an ensemble unloaded with `unload_dependents`): so do its
        composing models that were loaded only for it and that no other loaded ensemble uses, as in Triton."""
        check_model_name(name)
        # --model-namespacing: every repository's model of that name, including copies loaded while the name was
        # shared (or before it was): an unload by name leaves none of them serving.
        copies = [k for k in self.models if "/" in k and display_name(k) == name]
        for key in dict.fromkeys([*self.table.ambiguous.get(name, []), *copies, name]):
            await self._unload_key(key, composing=composing)

    async def _unload_key(self, name: str, *, composing: bool = False) -> None:
        steps: list[str] = []
        async with self.table.lock(name):
            entry = self.models.get(name)
            if entry is not None:
                if entry.config is not None and is_ensemble(entry.config):
                    steps = list(dict.fromkeys(s.model_name for s in entry.config.ensemble_scheduling.step))
                self.table.unload(entry)
            self.ensembles.forget(name)
        await self.ensembles.unload_dependents(name)
        for step in steps if composing else []:
            dependency = self.models.get(step)
            if (
                dependency is not None
                and dependency.for_ensemble
                and dependency.serving()
                and not self.ensembles.dependents(step)
            ):
                log.info("unloading '%s': it was loaded for ensemble '%s' only", step, name)
                await self._unload_key(step, composing=True)

    async def poll(self) -> None:
        """One poll of poll mode: load new and changed models, unload removed ones."""
        await self.catalog.sync(strict=False)
        scanned = self.catalog.scan()

        async def one(name: str) -> None:
            async with self.table.lock(name):
                entry = self.models.get(name)
                dirs = scanned.get(name)
                if not dirs:
                    if entry is not None and (entry.versions or entry.error):
                        log.info("model '%s' was removed from the repository", name)
                        self.table.unload(entry)
                        entry.seen = None
                        gone.append(name)
                    return
                if entry is None or entry.seen != await self.catalog.look(dirs):
                    await self._load_quietly(name, scanned)

        gone: list[str] = []
        await asyncio.gather(*(one(n) for n in sorted(set(scanned) | set(self.models))))
        for name in gone:
            await self.ensembles.unload_dependents(name)
        await self.ensembles.reload_orphans()

    async def poll_forever(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.poll()
            except Exception:  # a poll must never end polling
                log.exception("failed to poll the model repositories")

    async def load_on_demand(self, name: str, version: str) -> LoadedModel:
        """The version serving a request for `name`, loaded first where the model is in a repository but not
        loaded (--model-load-on-demand, and models registered by SageMaker's POST /models). Concurrent
        requests for it wait for the one load. Raises NotFound for a model in no repository."""
        scanned = self.catalog.scan()
        if name not in scanned:
            await self.catalog.sync(strict=False)
            scanned = self.catalog.scan()
            if name not in scanned:
                return self.table.get(name, version)  # Triton's error for an unknown model
        started = time.monotonic_ns()
        async with self.table.lock(name):
            entry = self.models.get(name)
            if entry is not None and entry.error and entry.seen == await self.catalog.look(scanned[name]):
                # Its files have not changed since its config failed: the same answer, without loading again.
                raise InvalidArgument(f"failed to load '{name}': {entry.error}")
            if entry is None or not entry.serving():
                log.info("loading '%s' on demand", name)
                await self._load(name, scanned, None)
        model = self.table.get(name, version)
        model.stats.cold_start.add(time.monotonic_ns() - started)
        return model

    async def _load(self, name: str, scanned: Scanned, override: LoadOverride | None) -> None:
        """One load of a model whose lock the caller holds (loading.py)."""
        await ModelLoad(name, scanned, override, self.table, self.catalog, self.builder, self.ensembles).run()

    async def _load_quietly(self, name: str, scanned: Scanned, override: LoadOverride | None = None) -> None:
        """A load at startup or from a poll: the failure is recorded and logged, not raised."""
        with contextlib.suppress(ModelhostError):  # recorded in the entry and logged by the load
            await self._load(name, scanned, override)

    # -- what the rest of the server reads ---------------------------------------------------------------------

    def get(self, name: str, version: str = "") -> LoadedModel:
        """The version that serves a request, with Triton's messages when there is none."""
        return self.table.get(name, version)

    def ready_versions(self, name: str) -> list[str]:
        return self.table.ready_versions(name)

    def ready_models(self) -> list[LoadedModel]:
        """Every ready model version, by name then version."""
        return self.table.ready_models()

    def all_ready(self) -> bool:
        return self.table.all_ready()

    def busy_versions(self) -> list[tuple[str, int, int]]:
        return self.table.busy_versions()

    def memory_in_use(self) -> int:
        """Host bytes the loaded model versions take."""
        return self.budget.in_use()

    async def unload_idle_forever(self, idle_s: float) -> None:
        """--model-idle-unload-secs: unload the models no request used for `idle_s` seconds, until cancelled."""
        await self.budget.unload_idle_forever(idle_s)

    async def settled(self, timeout: float | None = None) -> bool:
        """Wait until every retired version (and instance) is closed; False if some were not by `timeout`."""
        return await self.table.settled(timeout)

    def index(self, ready_only: bool = False) -> list[dict[str, str | int]]:
        """The repository index rows (views.index_rows)."""
        return index_rows(
            self.models, self.catalog.scan(), ready_only, with_memory=self.settings.memory_budget is not None
        )

    def status_rows(self) -> list[tuple[str, str, str]]:
        """(model, version, status) for the startup table, as Triton prints it."""
        return status_rows(self.index())

    def backend_rows(self) -> list[tuple[str, str, str]]:
        """(backend, where it lives, its --backend-config settings) for the loaded models' backends."""
        return backend_rows(self.models.values(), self.settings.backend_settings)

    def close(self) -> None:
        self.table.close()


__all__ = ["ModelRegistry"]
