"""The registry's table: every model's entry by key, one lock per key, and the lookups that read it (the version
that serves a request, readiness, what is loaded and busy).

The table is only touched from the event loop. Taking a model out of service (`unload`) and closing what no
longer serves (`retire`) are here too: every part of the registry that unloads (a request, the memory budget,
idleness, an ensemble losing a step) ends in the same two steps.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from collections.abc import Iterable

from modelhost.engine.model import LoadedModel
from modelhost.engine.registry.entries import UNLOADED, ModelEntry, ModelState, VersionEntry
from modelhost.errors import InvalidArgument, NotFound, Unavailable
from modelhost.host.memory import release_free_memory

log = logging.getLogger("modelhost.registry")


class ModelTable:
    __slots__ = ("_locks", "ambiguous", "models", "retiring", "started")

    def __init__(self) -> None:
        self.models: dict[str, ModelEntry] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # The tasks closing retired versions (and instances): `settled` waits for them.
        self.retiring: set[asyncio.Task[None]] = set()
        # --model-namespacing: the names several repositories hold, and their models' keys (the catalog keeps
        # it current at each scan; a request naming one of them is ambiguous).
        self.ambiguous: dict[str, list[str]] = {}
        # During a startup: the models whose load was tried, so that none is loaded (or its failure logged) twice.
        self.started: set[str] | None = None

    def lock(self, name: str) -> asyncio.Lock:
        """One load or unload at a time per model."""
        return self._locks.setdefault(name, asyncio.Lock())

    # -- lookups -----------------------------------------------------------------------------------------------

    def get(self, name: str, version: str = "") -> LoadedModel:
        """The version that serves a request, with Triton's messages when there is none."""
        entry = self.models.get(name)
        if entry is None and name in self.ambiguous:
            raise InvalidArgument(
                f"There are {len(self.ambiguous[name])} identifiers of model '{name}' in global map, model "
                "namespace must be provided to resolve ambiguity."
            )
        if entry is None:
            raise NotFound(f"Request for unknown model: '{name}' is not found")
        if version:
            ventry = entry.versions.get(int(version)) if version.isdigit() else None
            if ventry is None:
                raise NotFound(f"Request for unknown model: '{name}' version {version} is not found")
            if ventry.state != ModelState.READY or ventry.model is None:
                raise Unavailable(
                    f"Request for unknown model: '{name}' version {version} is not at ready state"
                )
            return ventry.model
        versions: Iterable[VersionEntry] = entry.versions.values()
        if len(entry.versions) > 1:  # the newest first (most models have one version: nothing to sort)
            versions = sorted(versions, key=lambda v: v.version, reverse=True)
        for ventry in versions:
            if ventry.state == ModelState.READY and ventry.model is not None:
                return ventry.model
        raise NotFound(f"Request for unknown model: '{name}' has no available versions")

    def ready_versions(self, name: str) -> list[str]:
        entry = self.models.get(name)
        if entry is None:
            return []
        return [str(v) for v, e in sorted(entry.versions.items()) if e.state == ModelState.READY]

    def ready_models(self) -> list[LoadedModel]:
        """Every ready model version, by name then version."""
        return [
            v.model
            for _, entry in sorted(self.models.items())
            for _, v in sorted(entry.versions.items())
            if v.state == ModelState.READY and v.model is not None
        ]

    def all_ready(self) -> bool:
        """Every model that should serve does (versions unloaded on purpose, or being unloaded, do not count, as
        in Triton, whose readiness right after an unload request is true)."""
        for entry in self.models.values():
            if entry.error:
                return False
            for v in entry.versions.values():
                if v.state not in (ModelState.READY, ModelState.UNLOADING) and v.reason != UNLOADED:
                    return False
        return True

    def busy_versions(self) -> list[tuple[str, int, int]]:
        """(model, version, requests in flight) of the loaded versions with requests queued or running."""
        return [
            (entry.name, version, ventry.model.in_flight)
            for entry in self.models.values()
            for version, ventry in entry.versions.items()
            if ventry.model is not None and ventry.model.busy
        ]

    # -- taking versions out of service ------------------------------------------------------------------------

    def unload(self, entry: ModelEntry, *, evicted: str = "") -> asyncio.Task[None] | None:
        """Stop serving every version of a model; the task that closes them (None: nothing to close).
        `evicted`: why the server unloaded it on its own (the index's note); any other unload clears the note."""
        entry.evicted = evicted
        retired: list[LoadedModel] = []
        for ventry in entry.versions.values():
            if ventry.state == ModelState.READY and ventry.model is not None:
                ventry.state = ModelState.UNLOADING
                retired.append(ventry.model)
            elif ventry.state != ModelState.UNLOADING:
                ventry.state, ventry.reason = ModelState.UNAVAILABLE, UNLOADED
        if entry.error:
            entry.error = ""
            entry.versions = {}
        entry.overridden = False
        entry.retained = None
        holder, entry.override_dir = entry.override_dir, None
        return self.retire(retired, holder)

    def retire(
        self, models: list[LoadedModel], holder: tempfile.TemporaryDirectory[str] | None
    ) -> asyncio.Task[None] | None:
        """Close models that no longer take requests, each once its last request is answered; then the files
        of an override (`holder`) they were loaded from."""
        if not models and holder is None:
            return None

        async def run() -> None:
            for model in models:
                await model.drained()
                try:
                    await asyncio.to_thread(model.close)
                except Exception:
                    log.exception("failed to close '%s' version %d", model.name, model.version)
                log.info("successfully unloaded '%s' version %d", model.name, model.version)
                entry = self.models.get(model.name)
                ventry = entry.versions.get(model.version) if entry is not None else None
                if ventry is not None and ventry.model is model:
                    ventry.model = None
                    ventry.state, ventry.reason = ModelState.UNAVAILABLE, UNLOADED
            if holder is not None:
                holder.cleanup()
            await asyncio.to_thread(release_free_memory)

        return self.track(asyncio.get_running_loop().create_task(run()))

    def track(self, task: asyncio.Task[None]) -> asyncio.Task[None]:
        """Count a closing task until it ends (`settled` waits for it)."""
        self.retiring.add(task)
        task.add_done_callback(self.retiring.discard)
        return task

    async def settled(self, timeout: float | None = None) -> bool:
        """Wait until every retired version (and instance) is closed; False if some were not by `timeout`. The
        closings go on either way (tests, shutdown)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.retiring:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            await asyncio.wait(list(self.retiring), timeout=left)
        return True

    def close(self) -> None:
        """Close every loaded version at once (shutdown, with no request left)."""
        for entry in self.models.values():
            for ventry in entry.versions.values():
                if ventry.model is not None:
                    ventry.model.close()
                    ventry.model = None
                    log.info("successfully unloaded '%s' version %d", entry.name, ventry.version)
                ventry.state, ventry.reason = ModelState.UNAVAILABLE, UNLOADED
            if entry.override_dir is not None:
                entry.override_dir.cleanup()
                entry.override_dir = None


__all__ = ["ModelTable"]
