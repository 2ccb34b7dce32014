"""One load of one model, in phases: read (its files, the repository agents, its configuration, its backend or
its composing models), choose the versions the version policy names, build each (or keep, or change its instances
in place), then either keep what served before (a failed update) or commit the new versions in one step.

The caller holds the model's lock. As in Triton: a reload builds the new versions while the old ones keep
serving, then swaps them in one step on the event loop, with no await, so that every request sees either the old
versions or the new ones; the old ones close once their last request is answered. A reload that fails leaves
what served before serving, with the failure in the index and the log. Versions whose files did not change are
kept as they are, not reloaded.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from pathlib import Path
from typing import Any

from modelhost.backends.registry import backend_for
from modelhost.config.normalize import is_ensemble
from modelhost.engine.registry.builder import (
    VersionBuilder,
    fault_as_error,
    load_error,
    same_but_version_policy,
)
from modelhost.engine.registry.catalog import Catalog, Scanned, Seen
from modelhost.engine.registry.ensembles import EnsembleGraph
from modelhost.engine.registry.entries import (
    UNLOADED,
    ModelEntry,
    ModelState,
    VersionEntry,
    display_name,
    select_versions,
)
from modelhost.engine.registry.table import ModelTable
from modelhost.errors import InternalError, InvalidArgument, ModelhostError, OutOfMemory
from modelhost.repository.fingerprint import ModelFingerprint
from modelhost.repository.overrides import LoadOverride, write_model_files

log = logging.getLogger("modelhost.registry")


class ModelLoad:
    """The state one load carries from phase to phase."""

    __slots__ = (
        "backend",
        "builder",
        "built",
        "catalog",
        "composing",
        "config",
        "dirs",
        "entry",
        "failures",
        "graph",
        "holder",
        "model_dir",
        "name",
        "newly_built",
        "out_of_memory",
        "override",
        "regroup",
        "scanned",
        "seen",
        "table",
    )

    def __init__(
        self,
        name: str,
        scanned: Scanned,
        override: LoadOverride | None,
        table: ModelTable,
        catalog: Catalog,
        builder: VersionBuilder,
        graph: EnsembleGraph,
    ) -> None:
        self.name = name
        self.scanned = scanned
        self.override = override
        self.table = table
        self.catalog = catalog
        self.builder = builder
        self.graph = graph
        self.entry = table.models.setdefault(name, ModelEntry(name))
        self.dirs: list[Path] = scanned.get(name, [])
        # The temporary directory of a load with file overrides, until the versions loaded from it close.
        self.holder: tempfile.TemporaryDirectory[str] | None = None
        self.model_dir = Path()
        self.seen: Seen = ((), None)
        self.config: Any = None
        self.backend: Any = None  # None: an ensemble
        self.composing: dict[str, Any] = {}
        self.built: dict[int, VersionEntry] = {}
        self.failures: dict[int, str] = {}
        self.out_of_memory = False  # a version failed for want of memory: the load fails with OutOfMemory
        self.newly_built = False
        self.regroup: set[int] = set()  # kept versions whose instances change in place (instance_update.py)

    async def run(self) -> None:
        if self.table.started is not None:
            self.table.started.add(self.name)
        self.entry.evicted = ""  # loaded again (by name, on demand, by a poll): whatever unloaded it is past
        try:
            await self._read()
        except ModelhostError as e:
            self._cleanup()
            if not self.dirs and not self.entry.serving():
                del self.table.models[self.name]  # no such model: nothing to record (and no effect on readiness)
            else:
                record_failure(self.entry, str(e))
            # Triton's words first (clients match on them), then the reason, which Triton leaves to its log.
            raise InvalidArgument(
                f"failed to load '{self.name}', failed to poll from model repository: {e}"
            ) from e
        fp = self.seen[1]
        assert fp is not None  # one directory
        wanted = select_versions(self.config, list(fp.versions))
        if not wanted:
            self._cleanup()
            message = f"at least one version must be available under the version policy of model '{self.name}'"
            record_failure(self.entry, message)
            raise InvalidArgument(f"load failed for model '{self.name}': {message}")
        config_changed = self.entry.config != self.config  # before a kept version takes the new version policy
        await self._build_versions(wanted, fp)
        for version, reason in self.failures.items():
            log.error("failed to load '%s' version %d: %s", self.name, version, reason)
        if self.failures and self.entry.serving():
            self._keep_serving()
            raise self._failure()
        # Triton logs a load that changed anything (a version built or retired, or only its configuration).
        changed = (
            self.newly_built or config_changed or set(self.entry.serving_versions()) != set(self.built)
        )
        self._commit()
        if self.failures:
            raise self._failure()
        if changed:
            log.info("successfully loaded '%s'", self.name)  # Triton's line, once per load that changed the model

    def _cleanup(self) -> None:
        if self.holder is not None:
            self.holder.cleanup()

    # -- read --------------------------------------------------------------------------------------------------

    async def _read(self) -> None:
        """The model's files, its configuration, and its backend (or, for an ensemble, its composing models)."""
        override, entry, name = self.override, self.entry, self.name
        if override is not None and override.files:
            self.holder, self.model_dir = await asyncio.to_thread(
                write_model_files, display_name(name), override.files
            )
            self.dirs = [self.model_dir]
        else:
            self.model_dir = self.catalog.model_dir(name, self.dirs)
        self.seen = await self.catalog.look(self.dirs)
        if override is None and entry.retained is not None and entry.retained[1] == self.seen:
            # Loaded with a config override alone, from the files it has now: that override again.
            self.override = LoadOverride(config_json=entry.retained[0])
        elif override is None:
            entry.seen = self.seen
        try:
            # The repository agents first, on the config as written: nothing of the model (an auto-complete
            # hook of its model.py, an op library) runs before they accept its files.
            await asyncio.to_thread(self.builder.run_agents, self.model_dir, self.override, display_name(name))
            self.config = await asyncio.to_thread(
                self.builder.read_config, self.model_dir, self.override, display_name(name)
            )
            if is_ensemble(self.config):
                self.catalog.resolve_steps(self.config, self.model_dir)
        except ModelhostError:
            raise
        except Exception as e:  # a fault of ours (an auto-complete hook, say) fails this model only
            log.exception("reading the configuration of model '%s' failed", name)
            raise InternalError(f"failed to read the configuration of model '{name}': {e!r}") from e
        if is_ensemble(self.config):
            self.composing = await self.graph.load_composing(name, self.config, self.scanned)
        else:
            # Off the event loop: the first model of a backend imports its framework (torch, openvino: seconds).
            self.backend = await asyncio.to_thread(backend_for, self.config)

    # -- build -------------------------------------------------------------------------------------------------

    def _reusable(self, version: int, fp: ModelFingerprint) -> VersionEntry | None:
        """The serving version kept as it is (its files and configuration unchanged but for the version
        policy), or kept with its instances changed in place (`regroups_in_place`); None: build it anew."""
        entry, override = self.entry, self.override
        old = entry.versions.get(version)
        if (
            (override is not None and override.files)
            or entry.overridden
            or old is None
            or old.state != ModelState.READY
            or entry.model_dir != self.model_dir
            or entry.shared_besides_config != fp.shared_besides_config
            or old.fingerprint != fp.versions.get(version)
        ):
            return None
        if same_but_version_policy(entry.config, self.config):
            # What the kept version reports (GET config) follows the new policy.
            if old.model is not None:
                old.model.config.version_policy.CopyFrom(self.config.version_policy)
            return old
        if self.builder.regroups_in_place(old.model, entry.config, self.config):
            self.regroup.add(version)
            return old
        return None

    async def _build_versions(self, wanted: list[int], fp: ModelFingerprint) -> None:
        present = [v for v in wanted if v in fp.versions]
        for version in wanted:
            kept = self._reusable(version, fp)
            if kept is not None and version in self.regroup:
                assert kept.model is not None
                try:
                    await self.builder.regroup(kept.model, self.config, self.backend)
                except Exception as e:  # the version serves on as it was
                    self.failures[version] = str(load_error(self.name, version, e))
                else:
                    self.built[version] = kept
            elif kept is not None:
                self.built[version] = kept
            elif version not in fp.versions and present:
                # As Triton: a version the policy names that has no directory is skipped with an error in the
                # log; the others load (the load fails only when none of them is there).
                log.error(
                    "version %d is specified for model '%s', but the version directory is not present",
                    version,
                    self.name,
                )
            elif version not in fp.versions:
                self.failures[version] = f"version {version} not found in {self.model_dir}"
            else:
                await self._build(version, fp.versions[version])

    async def _build(self, version: int, fingerprint: str) -> None:
        namespace = self.catalog.namespace(self.model_dir)
        try:
            if self.backend is None:
                model = fault_as_error(
                    self.builder.build_ensemble,
                    self.name,
                    version,
                    self.model_dir,
                    self.config,
                    self.composing,
                    namespace,
                )
            else:
                model = await self.builder.build(
                    self.name, version, self.model_dir, self.config, self.backend, namespace
                )
        except ModelhostError as e:
            self.failures[version] = str(e)
            self.out_of_memory = self.out_of_memory or isinstance(e, OutOfMemory)
        else:
            self.built[version] = VersionEntry(version, ModelState.READY, "", model, fingerprint)
            self.newly_built = True

    # -- keep or commit ----------------------------------------------------------------------------------------

    def _keep_serving(self) -> None:
        """A failed update: what served before keeps serving; what was built for it is closed."""
        entry = self.entry
        for version, ventry in self.built.items():
            if ventry is not entry.versions.get(version) and ventry.model is not None:
                self.table.retire([ventry.model], None)
        for version, reason in self.failures.items():
            old = entry.versions.get(version)
            if old is None or old.state != ModelState.READY:
                entry.versions[version] = VersionEntry(version, ModelState.UNAVAILABLE, reason)
        self._cleanup()
        log.error("failed to reload '%s': the versions loaded before keep serving", self.name)

    def _commit(self) -> None:
        """The new versions serve from now on, in one step (no await); the old ones close once drained."""
        entry, built, failures, override = self.entry, self.built, self.failures, self.override
        retired = [
            v.model for v in entry.versions.values() if v.model is not None and built.get(v.version) is not v
        ]
        for version, ventry in entry.versions.items():
            if version not in built and version not in failures and ventry.state == ModelState.READY:
                ventry.state = ModelState.UNLOADING
                built[version] = ventry  # shown as UNLOADING, then "unloaded"
            elif version not in built and version not in failures and ventry.state != ModelState.UNLOADING:
                built[version] = VersionEntry(version, ModelState.UNAVAILABLE, UNLOADED)
        for version, reason in failures.items():
            built[version] = VersionEntry(version, ModelState.UNAVAILABLE, reason)
        for ventry in built.values():
            if ventry.state == ModelState.READY:
                ventry.reason = ""  # a kept version may carry the reason of an earlier failed reload
        fp = self.seen[1]
        assert fp is not None
        old_holder = entry.override_dir
        entry.versions = dict(sorted(built.items()))
        entry.model_dir, entry.config, entry.error = self.model_dir, self.config, ""
        entry.shared_fingerprint = fp.shared
        entry.shared_besides_config = fp.shared_besides_config
        entry.overridden = override is not None and bool(override.files)
        retained_json = override.config_json if override is not None and not override.files else None
        entry.retained = (retained_json, self.seen) if retained_json is not None else None
        entry.override_dir = self.holder
        self.table.retire(retired, old_holder)

    def _failure(self) -> ModelhostError:
        states = "; ".join(f"version {v} is at UNAVAILABLE state: {r}" for v, r in self.failures.items())
        message = f"load failed for model '{self.name}': {states}"
        return OutOfMemory(message) if self.out_of_memory else InvalidArgument(message)


def record_failure(entry: ModelEntry, reason: str) -> None:
    """A load that failed before any version was built: a serving model keeps serving, with the reason beside
    its versions in the index; any other has the reason as its error."""
    serving = entry.serving()
    if serving:
        log.error("failed to reload '%s': %s (the versions loaded before keep serving)", entry.name, reason)
        for ventry in serving:  # in the index: still READY, and why the update did not happen
            ventry.reason = f"a reload failed: {reason}"
        return
    entry.error = reason
    entry.versions = {}
    log.error("failed to load '%s': %s", entry.name, reason)


__all__ = ["ModelLoad", "record_failure"]
