"""The model registry: which models and versions exist, their states, and the loaded versions that serve.

The registry is only touched from the event loop; blocking work (syncing a remote repository, reading configs,
building runtime sessions, closing them) runs on worker threads. Lifecycle rules, as in Triton:

- One load or unload at a time per model (a lock per name), and at most --model-load-thread-count loads at once.
- A reload builds the new versions while the old ones keep serving, then swaps them in one step on the event
  loop. From the swap on, new requests go to the new versions; the old ones are closed once their last request
  is answered (see `_retire`). No accepted request fails because of a reload or an unload.
- A reload that fails leaves what served before serving, with the failure in the index and the log.
- Versions whose files did not change are kept as they are, not reloaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from modelhost.backends.api import BackendContext, BackendServices, ModelInstance
from modelhost.backends.registry import backend_for
from modelhost.config import (
    complete_model_config,
    config_from_json,
    config_path,
    load_model_config,
    read_config,
)
from modelhost.config.normalize import is_ensemble
from modelhost.engine.classification import read_labels
from modelhost.engine.ensemble.plan import EnsemblePlan
from modelhost.engine.ensemble.scheduler import EnsembleScheduler
from modelhost.engine.model import LoadedModel
from modelhost.engine.registry.budget import check_fits, last_used_ms, memory_in_use, serving_bytes
from modelhost.engine.registry.build import (
    built_instances,
    close_all,
    fault_as_error,
    instance_plan,
    load_error,
    same_but_version_policy,
)
from modelhost.engine.registry.ensembles import dependency_layers, dependents, ensemble_cycle, steps_in_files
from modelhost.engine.registry.entries import (
    UNLOADED,
    ControlMode,
    LoadSettings,
    ModelEntry,
    ModelState,
    VersionEntry,
    display_name,
    select_versions,
)
from modelhost.engine.registry.instance_update import (
    free_index,
    only_instance_groups_differ,
    plan_change,
    signature,
)
from modelhost.engine.registry.model_memory import Footprint, files_size, sample
from modelhost.engine.registry.views import backend_rows, index_rows, status_rows
from modelhost.engine.registry.warmup import run_warmup
from modelhost.engine.scheduling.instances import InstancePool
from modelhost.engine.scheduling.rate_limiter import InstanceNeeds, needs_of
from modelhost.errors import (
    InternalError,
    InvalidArgument,
    ModelConfigError,
    ModelhostError,
    NotFound,
    OutOfMemory,
    Unavailable,
)
from modelhost.host.gpu_memory import check_load_limit
from modelhost.host.memory import release_free_memory
from modelhost.repository.agents import run_repository_agents
from modelhost.repository.fingerprint import ModelFingerprint, fingerprint
from modelhost.repository.layout import model_directories
from modelhost.repository.overrides import LoadOverride, check_model_name, write_model_files
from modelhost.repository.sources import RepositoryError, RepositorySource

log = logging.getLogger("modelhost.registry")


def _now_utc() -> str:
    """Now, as the repository index's `evicted` notes give it (UTC, to the second)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class ModelRegistry:
    def __init__(
        self, sources: list[RepositorySource], settings: LoadSettings, mode: ControlMode = "none"
    ) -> None:
        self.sources = sources
        self.settings = settings
        self.mode = mode
        self.models: dict[str, ModelEntry] = {}
        self._roots: list[Path | None] = [None] * len(sources)
        self._locks: dict[str, asyncio.Lock] = {}
        self._load_slots = asyncio.Semaphore(max(1, settings.load_threads))
        self._retiring: set[asyncio.Task[None]] = set()
        # Ensembles unloaded because a composing model went: loaded again once all their models serve again.
        self._orphans: set[str] = set()
        # Ensembles that failed to load for want of a composing model: tried again once it serves (as Triton).
        self._waiting: dict[str, str] = {}
        # During start(): the models whose load was tried, so that none is loaded (or its failure logged) twice.
        self._started: set[str] | None = None
        # What backends may use of the running server (python models call other models); set by the app.
        self.services = BackendServices()
        # Models never unloaded to make room or for idleness: those --load-model named (explicit mode).
        self.pinned: set[str] = set()
        # Under a memory budget, loads run one at a time: each load's memory delta is then its own.
        self._budget_lock = asyncio.Lock()
        # The last measured host bytes of each model's versions: the estimate for its next load.
        self._last_size: dict[str, int] = {}
        # Models registered by name from a directory outside the repositories (SageMaker's POST /models).
        self.registered: dict[str, Path] = {}
        # --model-namespacing: the names several repositories hold, and their models' keys (display_name).
        self.ambiguous: dict[str, list[str]] = {}

    # -- repositories ------------------------------------------------------------------------------------------

    @property
    def roots(self) -> list[Path]:
        """The local directories of the repositories (remote ones: their mirrors), once synced."""
        return [r for r in self._roots if r is not None]

    async def sync(self, *, strict: bool) -> None:
        """Bring every repository's local copy up to date. Not strict: a repository that cannot be read is
        logged and keeps its previous copy, so its models keep serving and the next poll tries again."""
        for i, source in enumerate(self.sources):
            try:
                self._roots[i] = await asyncio.to_thread(source.sync)
            except RepositoryError as e:
                if strict or self._roots[i] is None:
                    raise
                log.error("failed to poll model repository %s: %s (its models keep serving)", source.url, e)

    def scan(self) -> dict[str, list[Path]]:
        """Model directories by name, over every repository (a name may be in several: an error at load)."""
        found: dict[str, list[Path]] = {}
        for root in self.roots:
            try:
                dirs = model_directories(root)
            except OSError as e:
                log.error("failed to read model repository %s: %s", root, e)
                continue
            for name, path in dirs.items():
                found.setdefault(name, []).append(path)
        for name, path in self.registered.items():
            found[name] = [path]  # a registered mapping takes precedence over the repositories, as in Triton
        if self.settings.namespacing:
            # Each repository's model of a shared name is a model of its own, keyed by its directory.
            self.ambiguous = {name: [str(d) for d in dirs] for name, dirs in found.items() if len(dirs) > 1}
            for name, keys in self.ambiguous.items():
                del found[name]
                for key in keys:
                    found[key] = [Path(key)]
        return found

    def keys_of(self, name: str) -> list[str]:
        """The registry keys a name asked for stands for: itself, or under --model-namespacing every
        repository's model of that name (a load or unload by name acts on them all, as in Triton)."""
        return list(self.ambiguous.get(name, [name]))

    def _namespace(self, model_dir: Path) -> str:
        return str(model_dir.parent) if self.settings.namespacing else ""

    def _resolve_steps(self, config: Any, model_dir: Path) -> None:
        """Under --model-namespacing, an ensemble's step naming a model several repositories hold is its own
        repository's (Triton sets the step's model_namespace so): the step then names that model's key."""
        for step in config.ensemble_scheduling.step:
            keys = self.ambiguous.get(step.model_name)
            if keys is None:
                continue
            own = str(model_dir.parent / step.model_name)
            if own not in keys:
                raise ModelConfigError(
                    f"ensemble {config.name} contains models that are not available or ambiguous: "
                    f"{step.model_name}"
                )
            step.model_name = own

    # -- startup, polling, load and unload requests -------------------------------------------------------------

    async def start(self, names: Iterable[str] | None = None) -> None:
        """The initial load: every model of the repositories, or those named (explicit mode; '*' = all)."""
        await self.sync(strict=True)
        scanned = self.scan()
        wanted = sorted(scanned) if names is None else list(dict.fromkeys(names))
        if "*" in wanted:
            wanted = sorted(scanned)
        wanted = [
            key for name in wanted for key in self.keys_of(name)
        ]  # --model-namespacing: each repository's
        for name in wanted:
            if name not in scanned:  # asked for by --load-model: a startup failure, as in Triton
                self.models[name] = ModelEntry(name, error="model not found in any model repository")
                log.error("failed to load '%s': model not found in any model repository", name)
        wanted = [name for name in wanted if name in scanned]
        if self.mode == "explicit":
            self.pinned.update(wanted)
        # In dependency order, each model once: the models first, then the ensembles using them, layer by layer,
        # so that no ensemble loads a composing model while that model's own load is under way.
        self._started = set()
        for layer in self._dependency_layers(wanted, scanned):
            await asyncio.gather(*(self._load_quietly(name, scanned) for name in layer))
        self._started = None
        for name in wanted:  # asked for by name, even where an ensemble loaded it first
            if name in self.models:
                self.models[name].for_ensemble = False

    async def load(self, name: str, override: LoadOverride | None = None) -> None:
        """Load or reload a model (the repository extension's load); raises with the reason when it fails."""
        check_model_name(name)
        if self.settings.namespacing and len(keys := self._keys_now(name)) > 1:
            for key in keys:  # every repository's model of that name, as Triton loads them
                await self._load_key(key, override)
            if name in self.models:  # loaded while the name was one repository's: the copies replace it
                await self._unload_key(name)
            return
        await self._load_key(name, override)

    def _keys_now(self, name: str) -> list[str]:
        self.scan()  # the names the repositories share now
        return self.keys_of(name)

    async def _load_key(self, name: str, override: LoadOverride | None) -> None:
        async with self._lock(name):
            if override is None or not override.files:
                try:
                    await self.sync(strict=True)
                except RepositoryError as e:
                    raise Unavailable(
                        f"failed to load '{name}': the model repository cannot be read: {e}"
                    ) from e
            await self._load(name, self.scan(), override)
            if name in self.models:
                self.models[name].for_ensemble = False  # asked for by name
        await self._reload_orphans()

    async def unload(self, name: str, *, composing: bool = False) -> None:
        """Stop serving every version of a model; each closes once its in-flight requests are answered. The
        ensembles using it go too. `composing` (an ensemble unloaded with `unload_dependents`): so do its
        composing models that were loaded only for it and that no other loaded ensemble uses, as in Triton."""
        check_model_name(name)
        # --model-namespacing: every repository's model of that name, including copies loaded while the name was
        # shared (or before it was): an unload by name leaves none of them serving.
        copies = [k for k in self.models if "/" in k and display_name(k) == name]
        for key in dict.fromkeys([*self.ambiguous.get(name, []), *copies, name]):
            await self._unload_key(key, composing=composing)

    async def _unload_key(self, name: str, *, composing: bool = False) -> None:
        steps: list[str] = []
        async with self._lock(name):
            entry = self.models.get(name)
            if entry is not None:
                if entry.config is not None and is_ensemble(entry.config):
                    steps = list(dict.fromkeys(s.model_name for s in entry.config.ensemble_scheduling.step))
                self._unload(entry)
            self._orphans.discard(name)
            self._waiting.pop(name, None)
        await self._unload_dependents(name)
        for step in steps if composing else []:
            dependency = self.models.get(step)
            if (
                dependency is not None
                and dependency.for_ensemble
                and dependency.serving()
                and not self.dependents(step)
            ):
                log.info("unloading '%s': it was loaded for ensemble '%s' only", step, name)
                await self._unload_key(step, composing=True)

    async def poll(self) -> None:
        """One poll of poll mode: load new and changed models, unload removed ones."""
        await self.sync(strict=False)
        scanned = self.scan()

        async def one(name: str) -> None:
            async with self._lock(name):
                entry = self.models.get(name)
                dirs = scanned.get(name)
                if not dirs:
                    if entry is not None and (entry.versions or entry.error):
                        log.info("model '%s' was removed from the repository", name)
                        self._unload(entry)
                        entry.seen = None
                        gone.append(name)
                    return
                if entry is None or entry.seen != await self._look(dirs):
                    await self._load_quietly(name, scanned)

        gone: list[str] = []
        await asyncio.gather(*(one(n) for n in sorted(set(scanned) | set(self.models))))
        for name in gone:
            await self._unload_dependents(name)
        await self._reload_orphans()

    async def poll_forever(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.poll()
            except Exception:  # a poll must never end polling
                log.exception("failed to poll the model repositories")

    async def settled(self, timeout: float | None = None) -> bool:
        """Wait until every retired version (and instance) is closed; False if some were not by `timeout`. The
        closings go on either way (tests, shutdown)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._retiring:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            await asyncio.wait(list(self._retiring), timeout=left)
        return True

    # -- loading -----------------------------------------------------------------------------------------------

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    async def _look(self, dirs: list[Path]) -> tuple[tuple[Path, ...], ModelFingerprint | None]:
        fp = await asyncio.to_thread(fingerprint, dirs[0]) if len(dirs) == 1 else None
        return tuple(dirs), fp

    def _dependency_layers(self, names: list[str], scanned: dict[str, list[Path]]) -> list[list[str]]:
        return dependency_layers(names, lambda name: self._steps_in_files(name, scanned))

    async def _load_quietly(self, name: str, scanned: dict[str, list[Path]]) -> None:
        """A load at startup or from a poll: the failure is recorded and logged, not raised."""
        with contextlib.suppress(ModelhostError):  # recorded in the entry and logged by _load
            await self._load(name, scanned, None)

    def _model_dir(self, name: str, dirs: list[Path]) -> Path:
        if not dirs:
            raise InvalidArgument("model not found in any model repository")
        if len(dirs) > 1:
            where = ", ".join(str(p.parent) for p in dirs)
            raise InvalidArgument(f"model '{name}' appears in multiple model repositories: {where}")
        return dirs[0]

    def _run_agents(self, model_dir: Path, override: LoadOverride | None, name: str) -> None:
        """The repository agents the config names (parsed, not completed), run on the model's files."""
        if override is not None and override.config_json is not None:
            written = config_from_json(override.config_json, model_dir.name)
        else:
            path = config_path(model_dir, self.settings.config_name)
            if path is None:
                return  # no config file: no agent named
            written = read_config(path, name)
        if written.model_repository_agents.agents:
            run_repository_agents(written, model_dir)

    def _read_config(self, model_dir: Path, override: LoadOverride | None, name: str = "") -> Any:
        settings = self.settings
        # --backend-config=default-max-batch-size (global) and =<backend>,default-max-batch-size, by backend.
        default_mbs = {
            backend: int(values["default-max-batch-size"])
            for backend, values in settings.backend_config.items()
            if "default-max-batch-size" in values
        }
        if override is not None and override.config_json is not None:
            parsed = config_from_json(override.config_json, model_dir.name)
            return complete_model_config(
                parsed,
                model_dir,
                source="the config override of the load request",
                auto_complete=settings.auto_complete,
                default_max_batch_size=default_mbs,
                gpu_count=settings.gpu_count,
                model_name=name,
                backend_config=settings.backend_config,
            )
        return load_model_config(
            model_dir,
            config_name=settings.config_name,
            auto_complete=settings.auto_complete,
            default_max_batch_size=default_mbs,
            gpu_count=settings.gpu_count,
            served_name=name,
            backend_config=settings.backend_config,
        )

    async def _load(self, name: str, scanned: dict[str, list[Path]], override: LoadOverride | None) -> None:
        if self._started is not None:
            self._started.add(name)
        entry = self.models.setdefault(name, ModelEntry(name))
        entry.evicted = ""  # loaded again (by name, on demand, by a poll): whatever unloaded it is past
        dirs = scanned.get(name, [])
        holder: tempfile.TemporaryDirectory[str] | None = None
        try:
            if override is not None and override.files:
                holder, model_dir = await asyncio.to_thread(
                    write_model_files, display_name(name), override.files
                )
                dirs = [model_dir]
            else:
                model_dir = self._model_dir(name, dirs)
            seen = await self._look(dirs)
            if override is None and entry.retained is not None and entry.retained[1] == seen:
                override = LoadOverride(
                    config_json=entry.retained[0]
                )  # the files are those it was loaded from
            elif override is None:
                entry.seen = seen
            try:
                # The repository agents first, on the config as written: nothing of the model (an auto-complete
                # hook of its model.py, an op library) runs before they accept its files.
                await asyncio.to_thread(self._run_agents, model_dir, override, display_name(name))
                config = await asyncio.to_thread(self._read_config, model_dir, override, display_name(name))
                if self.ambiguous and is_ensemble(config):
                    self._resolve_steps(config, model_dir)
            except ModelhostError:
                raise
            except Exception as e:  # a fault of ours (an auto-complete hook, say) fails this model only
                log.exception("reading the configuration of model '%s' failed", name)
                raise InternalError(f"failed to read the configuration of model '{name}': {e!r}") from e
            # Off the event loop: the first model of a backend imports its framework (torch, openvino: seconds).
            backend = None if is_ensemble(config) else await asyncio.to_thread(backend_for, config)
            if backend is None:
                composing = await self._load_composing(name, config, scanned)
        except ModelhostError as e:
            if holder is not None:
                holder.cleanup()
            if not dirs and not entry.serving():
                del self.models[name]  # no such model: nothing to record (and no effect on readiness)
            else:
                self._record_failure(entry, str(e))
            # Triton's words first (clients match on them), then the reason, which Triton leaves to its log.
            raise InvalidArgument(
                f"failed to load '{name}', failed to poll from model repository: {e}"
            ) from e
        fp = seen[1]
        assert fp is not None  # one directory
        wanted = select_versions(config, list(fp.versions))
        if not wanted:
            if holder is not None:
                holder.cleanup()
            message = f"at least one version must be available under the version policy of model '{name}'"
            self._record_failure(entry, message)
            raise InvalidArgument(f"load failed for model '{name}': {message}")

        regroup: set[int] = set()  # kept versions whose instances change in place (instance_update.py)

        def reusable(version: int) -> VersionEntry | None:
            old = entry.versions.get(version)
            if (
                (override is None or not override.files)
                and not entry.overridden
                and old is not None
                and old.state == ModelState.READY
                and entry.model_dir == model_dir
                and entry.shared_besides_config == fp.shared_besides_config
                and old.fingerprint == fp.versions.get(version)
            ):
                if same_but_version_policy(entry.config, config):
                    # What the kept version reports (GET config) follows the new policy.
                    if old.model is not None:
                        old.model.config.version_policy.CopyFrom(config.version_policy)
                    return old
                if self._regroups_in_place(old.model, entry.config, config):
                    regroup.add(version)
                    return old
            return None

        built: dict[int, VersionEntry] = {}
        failures: dict[int, str] = {}
        out_of_memory = False  # a version failed for want of memory: the load fails with OutOfMemory
        present = [v for v in wanted if v in fp.versions]
        newly_built = False
        config_changed = entry.config != config  # before a kept version takes the new version policy
        for version in wanted:
            kept = reusable(version)
            if kept is not None and version in regroup:
                assert kept.model is not None
                try:
                    await self._regroup(kept.model, config, backend)
                except Exception as e:  # the version serves on as it was
                    failures[version] = str(load_error(name, version, e))
                else:
                    built[version] = kept
            elif kept is not None:
                built[version] = kept
            elif version not in fp.versions and present:
                # As Triton: a version the policy names that has no directory is skipped with an error in the
                # log; the others load (the load fails only when none of them is there).
                log.error(
                    "version %d is specified for model '%s', but the version directory is not present",
                    version,
                    name,
                )
            elif version not in fp.versions:
                failures[version] = f"version {version} not found in {model_dir}"
            else:
                try:
                    if backend is None:
                        model = fault_as_error(
                            self._build_ensemble, name, version, model_dir, config, composing
                        )
                    else:
                        model = await self._build(name, version, model_dir, config, backend)
                except ModelhostError as e:
                    failures[version] = str(e)
                    out_of_memory = out_of_memory or isinstance(e, OutOfMemory)
                else:
                    built[version] = VersionEntry(version, ModelState.READY, "", model, fp.versions[version])
                    newly_built = True
        for version, reason in failures.items():
            log.error("failed to load '%s' version %d: %s", name, version, reason)

        if failures and entry.serving():
            # A failed update: what served before keeps serving; what was built for it is closed.
            for version, ventry in built.items():
                if ventry is not entry.versions.get(version) and ventry.model is not None:
                    self._retire([ventry.model], None)
            for version, reason in failures.items():
                old = entry.versions.get(version)
                if old is None or old.state != ModelState.READY:
                    entry.versions[version] = VersionEntry(version, ModelState.UNAVAILABLE, reason)
            if holder is not None:
                holder.cleanup()
            log.error("failed to reload '%s': the versions loaded before keep serving", name)
            raise self._failure(name, failures, out_of_memory)

        # Triton logs a load that changed anything (a version built or retired, or only its configuration).
        changed = newly_built or config_changed or set(entry.serving_versions()) != set(built)
        # Commit: one step, with no await, so every request sees either the old versions or the new ones.
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
        old_holder = entry.override_dir
        entry.versions = dict(sorted(built.items()))
        entry.model_dir, entry.config, entry.error = model_dir, config, ""
        entry.shared_fingerprint = fp.shared
        entry.shared_besides_config = fp.shared_besides_config
        entry.overridden = override is not None and bool(override.files)
        retained_json = override.config_json if override is not None and not override.files else None
        entry.retained = (retained_json, seen) if retained_json is not None else None
        entry.override_dir = holder
        self._retire(retired, old_holder)
        if failures:
            raise self._failure(name, failures, out_of_memory)
        if changed:
            log.info("successfully loaded '%s'", name)  # Triton's line, once per load that changed the model

    @staticmethod
    def _failure(name: str, failures: dict[int, str], out_of_memory: bool) -> ModelhostError:
        states = "; ".join(f"version {v} is at UNAVAILABLE state: {r}" for v, r in failures.items())
        message = f"load failed for model '{name}': {states}"
        return OutOfMemory(message) if out_of_memory else InvalidArgument(message)

    def _record_failure(self, entry: ModelEntry, reason: str) -> None:
        serving = entry.serving()
        if serving:
            log.error(
                "failed to reload '%s': %s (the versions loaded before keep serving)", entry.name, reason
            )
            for ventry in serving:  # in the index: still READY, and why the update did not happen
                ventry.reason = f"a reload failed: {reason}"
            return
        entry.error = reason
        entry.versions = {}
        log.error("failed to load '%s': %s", entry.name, reason)

    # -- ensembles ---------------------------------------------------------------------------------------------

    async def _load_composing(self, name: str, config: Any, scanned: dict[str, list[Path]]) -> dict[str, Any]:
        """Load the models an ensemble's steps name, where not already serving (as Triton does, in every
        mode), and return their configs. A cycle of ensembles fails here rather than waiting on itself."""
        cycle = self._ensemble_cycle(name, config, scanned)
        if cycle:
            # Triton's words: the start, "...", the ensemble whose step names the start, the start again.
            raise ModelConfigError(
                f"circular dependency between ensembles: {name} -> ... -> {cycle[-2]} -> {name}"
            )
        configs: dict[str, Any] = {}
        external = self.services.external_models
        for step in config.ensemble_scheduling.step:
            dependency = step.model_name
            if dependency in configs:
                continue
            # Triton's words when a composing model cannot serve; then why, which Triton leaves to its log.
            unavailable = f"ensemble {name} contains models that are not available or ambiguous: {dependency}"
            if external is not None and external.serves(dependency):
                # Served elsewhere (another deployment of a Ray cluster): its configuration from there, once it
                # serves the versions the steps name; nothing of it loads here.
                required = {
                    s.model_version for s in config.ensemble_scheduling.step if s.model_name == dependency
                }
                try:
                    configs[dependency] = await external.config(dependency, required)
                except ModelhostError as e:
                    raise ModelConfigError(f"{unavailable} ({e})") from e
                continue
            self._waiting[name] = dependency  # until it loads (removed below, or on the next successful load)
            if dependency not in scanned and dependency not in self.models:
                raise ModelConfigError(unavailable)
            async with self._lock(dependency):
                entry = self.models.get(dependency)
                tried = self._started is not None and dependency in self._started
                if tried and (entry is None or not entry.serving()):
                    # It failed earlier in this start (and said why): not loaded, nor logged, twice.
                    raise ModelConfigError(unavailable)
                if entry is None or not entry.serving():
                    try:
                        await self._load(dependency, scanned, None)
                        self.models[dependency].for_ensemble = True
                    except ModelhostError as e:
                        raise ModelConfigError(f"{unavailable} ({e})") from e
                entry = self.models[dependency]
            loaded = {v.version for v in entry.serving()}
            for required in {
                s.model_version for s in config.ensemble_scheduling.step if s.model_name == dependency
            }:
                if required >= 0 and required not in loaded:
                    raise ModelConfigError(
                        f"ensemble '{name}' depends on '{dependency}' whose required version {required} is not loaded."
                    )
            configs[dependency] = entry.config
        self._waiting.pop(name, None)
        return configs

    def _ensemble_cycle(self, name: str, config: Any, scanned: dict[str, list[Path]]) -> list[str]:
        return ensemble_cycle(name, config, lambda model: self._steps_in_files(model, scanned))

    def _steps_in_files(self, model: str, scanned: dict[str, list[Path]]) -> list[str]:
        dirs = scanned.get(model, [])
        steps = steps_in_files(dirs, model, self.settings.config_name)
        if not self.ambiguous or len(dirs) != 1:
            return steps
        # --model-namespacing: a shared name in a step is the ensemble's own repository's model (its key).
        return [str(dirs[0].parent / s) if s in self.ambiguous else s for s in steps]

    def _build_ensemble(
        self, name: str, version: int, model_dir: Path, config: Any, composing: dict[str, Any]
    ) -> LoadedModel:
        started = time.monotonic()
        plan = EnsemblePlan(config, composing)
        # Triton decides it from the steps and sets it, false included: the (empty) message is in the config.
        config.model_transaction_policy.SetInParent()
        config.model_transaction_policy.decoupled = plan.decoupled
        model = LoadedModel(
            display_name(name),
            version,
            config,
            model_dir,
            InstancePool([]),
            ensemble=EnsembleScheduler(plan, config, self.services),
        )
        model.stats.namespace = self._namespace(model_dir)
        model.cache_name = f"{model.stats.namespace}/{model.name}" if model.stats.namespace else model.name
        self._ensemble_labels(model, config, composing)
        # A decoupled ensemble is not cached (as a decoupled model: refused at load by Triton).
        model.stats.cached = (
            self.settings.response_cache and bool(config.response_cache.enable) and not plan.decoupled
        )
        model.stats.load_duration_s = time.monotonic() - started
        log.info("loaded '%s' version %d", name, version)
        return model

    def _ensemble_labels(self, model: LoadedModel, config: Any, composing: dict[str, Any]) -> None:
        """An ensemble output without labels of its own classifies with those of the composing model's output
        it comes from, as Triton completes an ensemble's label provider at load."""
        for step in config.ensemble_scheduling.step:
            entry = self.models.get(step.model_name)
            if entry is None or entry.model_dir is None:
                continue
            for produced, tensor in step.output_map.items():
                if model.labels.get(tensor):
                    continue
                spec = next((o for o in composing[step.model_name].output if o.name == produced), None)
                if tensor in model.labels and spec is not None and spec.label_filename:
                    model.labels[tensor] = read_labels(entry.model_dir, spec.label_filename)

    async def _unload_dependents(self, name: str) -> None:
        """An ensemble cannot serve without its composing models: unloading one unloads the ensembles using it,
        as in Triton (with or without `unload_dependents`), until it is back."""
        for dependent in self.dependents(name):
            async with self._lock(dependent):
                entry = self.models.get(dependent)
                if entry is not None and entry.serving():
                    log.info("unloading ensemble '%s': its composing model '%s' is unloaded", dependent, name)
                    self._unload(entry)
                    self._orphans.add(dependent)

    async def _reload_orphans(self) -> None:
        """Load again the ensembles unloaded for a composing model, and those that failed for want of one, once
        what they need serves."""
        for name, dependency in sorted(self._waiting.items()):
            entry = self.models.get(dependency)
            if entry is not None and entry.serving():
                del self._waiting[name]
                async with self._lock(name):
                    await self._load_quietly(name, self.scan())
        scanned: dict[str, list[Path]] | None = None
        for name in sorted(self._orphans):
            entry = self.models.get(name)
            steps = [] if entry is None or entry.config is None else entry.config.ensemble_scheduling.step
            if not all((m := self.models.get(s.model_name)) is not None and m.serving() for s in steps):
                continue
            self._orphans.discard(name)
            scanned = self.scan() if scanned is None else scanned
            async with self._lock(name):
                await self._load_quietly(name, scanned)

    def dependents(self, name: str) -> list[str]:
        """The loaded ensembles with a step naming `name`, and those naming them, and so on."""
        return dependents(name, self.models.values())

    async def _build(
        self, name: str, version: int, model_dir: Path, config: Any, backend: Any
    ) -> LoadedModel:
        """Load one version (its instances, then warmup), retried --model-load-retry-count times."""
        attempts = 1 + max(0, self.settings.load_retries)
        log.info("loading: %s:%d", name, version)  # Triton's line, which log scrapers wait for
        for attempt in range(1, attempts + 1):
            started = time.monotonic()
            try:
                async with self._load_slots:
                    if self.settings.memory_budget is None:
                        model = await self._build_measured(name, version, model_dir, config, backend)
                    else:
                        async with self._budget_lock:
                            model = await self._build_within_budget(name, version, model_dir, config, backend)
            except Exception as e:  # a backend fault at load fails this version only
                error = load_error(name, version, e)
                if isinstance(error, OutOfMemory):
                    attempts = attempt  # more memory will not appear by trying again
            else:
                model.stats.load_duration_s = time.monotonic() - started
                log.info("loaded '%s' version %d (%.2f s)", name, version, time.monotonic() - started)
                return model
            if attempt < attempts:
                log.warning(
                    "loading '%s' version %d failed (attempt %d of %d): %s",
                    name,
                    version,
                    attempt,
                    attempts,
                    error,
                )
        raise error

    def _devices(self, config: Any) -> list[int]:
        return sorted({device for group, _, device in instance_plan(config, self.settings.gpu_count)
                       if group.kind == group.KIND_GPU}) if self.settings.gpu_count else []  # fmt: skip

    async def _build_measured(
        self, name: str, version: int, model_dir: Path, config: Any, backend: Any
    ) -> LoadedModel:
        """Build a version and record what it takes: the memory of the process tree before and after."""
        devices = self._devices(config)
        before = await asyncio.to_thread(sample, devices)
        model = await asyncio.to_thread(self._load_version, name, version, model_dir, config, backend)
        after = await asyncio.to_thread(sample, devices)
        footprint = Footprint.between(before, after)
        model.stats.memory_bytes = footprint.host
        model.stats.gpu_memory_bytes = footprint.gpus
        self._last_size[name] = footprint.host
        return model

    def memory_in_use(self, *, besides: str = "") -> int:
        """Host bytes the loaded model versions take (all but those of `besides`)."""
        return memory_in_use(self.models.values(), besides)

    async def _build_within_budget(
        self, name: str, version: int, model_dir: Path, config: Any, backend: Any
    ) -> LoadedModel:
        """Build a version under --model-memory-budget: make room first (idle models, least recently used
        first) for what it is expected to take, then check what it took. The versions of `name` itself do not
        count: a reload replaces them."""
        expected = self._last_size.get(name)
        if expected is None:
            expected = await asyncio.to_thread(files_size, model_dir / str(version))
        # A load that could never fit fails here, before anything is unloaded for it.
        self._check_fits(name, version, expected, "needs at least")
        await self._make_room(expected, besides=name)
        model = await self._build_measured(name, version, model_dir, config, backend)
        needed = model.stats.memory_bytes
        try:
            self._check_fits(name, version, needed, "takes")
            await self._make_room(needed, besides=name)
            self._check_fits(name, version, needed, "takes", unloadable=False)
        except OutOfMemory:
            await asyncio.to_thread(model.close)
            raise
        return model

    def _check_fits(
        self, name: str, version: int, needed: int, verb: str, *, unloadable: bool = True
    ) -> None:
        """Raise OutOfMemory when `needed` more bytes cannot fit in the budget, even once every model that may
        be unloaded is (`unloadable`), or as things stand."""
        budget = self.settings.memory_budget
        assert budget is not None
        kept = self.memory_in_use(besides=name)
        if unloadable:
            kept -= serving_bytes(e for e in self.models.values() if self._unloadable(e, name))
        check_fits(name, version, needed, verb, kept, budget)

    # -- making room: the memory budget and idle models -----------------------------------------------------

    def _unloadable(self, entry: ModelEntry, besides: str) -> bool:
        """Whether a model may be unloaded to make room or for idleness: loaded in explicit mode, not pinned,
        not loading or unloading, no request queued or in flight, and no loaded ensemble using it."""
        if self.mode != "explicit" or entry.name in (besides, *self.pinned):
            return False
        serving = entry.serving()
        if (
            not serving
            or self._lock(entry.name).locked()
            or entry.config is None
            or is_ensemble(entry.config)
        ):
            return False
        if any(v.model is not None and v.model.busy for v in serving):
            return False
        return not self.dependents(entry.name)

    async def _make_room(self, needed: int, *, besides: str) -> None:
        """Unload idle models, least recently used first, until `needed` more bytes fit in the budget or
        nothing more may be unloaded."""
        budget = self.settings.memory_budget
        assert budget is not None
        while self.memory_in_use(besides=besides) + needed > budget:  # never true without candidates left
            candidates = [e for e in self.models.values() if self._unloadable(e, besides)]
            if not candidates:
                return
            victim = min(candidates, key=last_used_ms)
            freed = sum(v.model.stats.memory_bytes for v in victim.serving() if v.model is not None)
            log.info(
                "unloading '%s' (%d bytes, least recently used) to make room for '%s' under "
                "--model-memory-budget=%d",
                victim.name,
                freed,
                besides,
                budget,
            )
            await self._unload_now(
                victim.name,
                evicted=f"{_now_utc()}: unloaded to make room for '{besides}' under --model-memory-budget",
            )

    async def _unload_now(self, name: str, *, evicted: str) -> None:
        """Unload a model the server evicts on its own, saying why (`evicted`), and wait until its versions are
        closed (their memory given back)."""
        async with self._lock(name):
            entry = self.models.get(name)
            task = self._unload(entry, evicted=evicted) if entry is not None else None
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    async def unload_idle(self, idle_s: float) -> list[str]:
        """Unload the models no request used for `idle_s` seconds (--model-idle-unload-secs)."""
        now_ms = time.time() * 1000
        idle = [
            e.name
            for e in list(self.models.values())
            if self._unloadable(e, "") and now_ms - last_used_ms(e) >= idle_s * 1000
        ]
        for name in idle:
            entry = self.models.get(name)
            if entry is not None and self._unloadable(entry, ""):
                log.info("unloading '%s': no request for %g s (--model-idle-unload-secs)", name, idle_s)
                await self._unload_now(
                    name, evicted=f"{_now_utc()}: unloaded after {idle_s:g} s idle (--model-idle-unload-secs)"
                )
        return idle

    async def unload_idle_forever(self, idle_s: float) -> None:
        interval = min(max(idle_s / 4, 0.1), 5.0)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.unload_idle(idle_s)
            except Exception:  # must never end the watch
                log.exception("failed to unload idle models")

    async def load_on_demand(self, name: str, version: str) -> LoadedModel:
        """The version serving a request for `name`, loaded first where the model is in a repository but not
        loaded (--model-load-on-demand, and models registered by SageMaker's POST /models). Concurrent
        requests for it wait for the one load. Raises NotFound for a model in no repository."""
        scanned = self.scan()
        if name not in scanned:
            await self.sync(strict=False)
            scanned = self.scan()
            if name not in scanned:
                return self.get(name, version)  # Triton's error for an unknown model
        started = time.monotonic_ns()
        async with self._lock(name):
            entry = self.models.get(name)
            if entry is not None and entry.error and entry.seen == await self._look(scanned[name]):
                # Its files have not changed since its config failed: the same answer, without loading again.
                raise InvalidArgument(f"failed to load '{name}': {entry.error}")
            if entry is None or not entry.serving():
                log.info("loading '%s' on demand", name)
                await self._load(name, scanned, None)
        model = self.get(name, version)
        model.stats.cold_start.add(time.monotonic_ns() - started)
        return model

    def _context(self, name: str, version: int, model_dir: Path, config: Any, backend: Any) -> BackendContext:
        backend_config = self.settings.backend_settings(backend.name)
        return BackendContext(
            model_name=display_name(name),
            version=version,
            model_dir=model_dir,
            version_dir=model_dir / str(version),
            config=config,
            backend_config=backend_config,
            total_instances=len(instance_plan(config, self.settings.gpu_count)),
            gpu_count=self.settings.gpu_count,
            gpu_memory=self.settings.gpu_memory,
            services=self.services,
        )

    def _new_instances(
        self, ctx: BackendContext, backend: Any, plan: list[tuple[Any, int, int]]
    ) -> list[ModelInstance]:
        """Build the plan's instances and warm them up (before they serve, as in Triton); closed on failure."""
        instances: list[ModelInstance] = built_instances(backend, ctx, plan, self.settings.host_policies)
        try:
            for group, index, device in plan:
                # Triton's line for a new instance (its backends', in their words)
                log.info(
                    "TRITONBACKEND_ModelInstanceInitialize: %s_%d (%s device %d)",
                    group.name,
                    index,
                    "GPU" if group.kind == group.KIND_GPU else "CPU",
                    device,
                )
                if group.kind == group.KIND_GPU:
                    # After the instance exists, as tritonserver checks (for every backend): its own memory
                    # counts against --model-load-gpu-limit.
                    check_load_limit(self.settings.gpu_memory, f"{group.name}_{index}", device)
            run_warmup(ctx.config, ctx.model_dir, instances)
        except BaseException:
            for instance in instances:
                instance.close()
            raise
        return instances

    def _needs(self, plan: list[tuple[Any, int, int]]) -> list[InstanceNeeds] | None:
        limiter = self.settings.rate_limiter
        return [needs_of(group, device) for group, _, device in plan] if limiter is not None else None

    def _load_version(
        self, name: str, version: int, model_dir: Path, config: Any, backend: Any
    ) -> LoadedModel:
        plan = instance_plan(config, self.settings.gpu_count)
        instances = self._new_instances(
            self._context(name, version, model_dir, config, backend), backend, plan
        )
        try:
            # fails where the limiter cannot serve them
            pool = InstancePool(instances, self.settings.rate_limiter, self._needs(plan))
        except BaseException:
            for instance in instances:
                instance.close()
            raise
        model = LoadedModel(display_name(name), version, config, model_dir, pool)
        model.stats.namespace = self._namespace(model_dir)
        model.cache_name = f"{model.stats.namespace}/{model.name}" if model.stats.namespace else model.name
        model.placements = [(signature(g, d), i) for (g, _, d), i in zip(plan, instances, strict=True)]
        model.stats.cached = self.settings.response_cache and bool(config.response_cache.enable)
        return model

    # -- instance updates --------------------------------------------------------------------------------------

    def _regroups_in_place(self, model: LoadedModel | None, old: Any, new: Any) -> bool:
        """Whether a reload from config `old` to `new` adds and removes instances of the serving `model` instead
        of loading it anew (instance_update.py): only the instance groups changed, and whether the rate limiter
        governs its instances stays as it was."""
        if model is None or model.ensemble is not None or not only_instance_groups_differ(old, new):
            return False
        needs = self._needs(instance_plan(new, self.settings.gpu_count))
        return model.pool.rate_limited == (needs is not None and any(n.resources for n in needs))

    async def _regroup(self, model: LoadedModel, config: Any, backend: Any) -> None:
        """Add and remove instances of a serving version for the instance groups of `config`. The version serves
        throughout; nothing changes when a new instance fails to load or the rate limiter cannot serve it."""
        plan = instance_plan(config, self.settings.gpu_count)
        change = plan_change(model.placements, plan, model.sequences_by_instance())
        taken = {i.name for i in model.pool.instances}
        add = [(group, free_index(group, index, taken), device) for group, index, device in change.add]
        added: list[ModelInstance] = []
        if add:
            ctx = self._context(model.name, model.version, model.model_dir, config, backend)
            async with self._load_slots:
                added = await asyncio.to_thread(self._new_instances, ctx, backend, add)
            try:
                model.add_instances(added, self._needs(add))
            except BaseException:
                await asyncio.to_thread(close_all, added)
                raise
        # The load returns once the removed instances are closed, but for those that serve sequences to their
        # end: they close in the background.
        holding = model.sequences_by_instance()
        retiring = model.retire_instances(change.remove)
        model.placements = change.kept + [
            (signature(g, d), i) for (g, _, d), i in zip(add, added, strict=True)
        ]
        model.config.CopyFrom(config)
        log.info(
            "updated the instances of '%s' version %d: %d added, %d removed",
            model.name,
            model.version,
            len(added),
            len(change.remove),
        )
        now = [t for t, i in zip(retiring, change.remove, strict=True) if not holding.get(id(i), 0)]
        for task in retiring:
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)
        if now:
            await asyncio.gather(*now)

    # -- unloading ---------------------------------------------------------------------------------------------

    def _unload(self, entry: ModelEntry, *, evicted: str = "") -> asyncio.Task[None] | None:
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
        return self._retire(retired, holder)

    def _retire(
        self, models: list[LoadedModel], holder: tempfile.TemporaryDirectory[str] | None
    ) -> asyncio.Task[None] | None:
        """Close models that no longer take requests, each once its last request is answered."""
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

        task = asyncio.get_running_loop().create_task(run())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
        return task

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

    def index(self, ready_only: bool = False) -> list[dict[str, str | int]]:
        """The repository index rows (views.index_rows)."""
        return index_rows(
            self.models, self.scan(), ready_only, with_memory=self.settings.memory_budget is not None
        )

    def status_rows(self) -> list[tuple[str, str, str]]:
        """(model, version, status) for the startup table, as Triton prints it."""
        return status_rows(self.index())

    def backend_rows(self) -> list[tuple[str, str, str]]:
        """(backend, where it lives, its --backend-config settings) for the loaded models' backends."""
        return backend_rows(self.models.values(), self.settings.backend_settings)

    def busy_versions(self) -> list[tuple[str, int, int]]:
        """(model, version, requests in flight) of the loaded versions with requests queued or running."""
        return [
            (entry.name, version, ventry.model.in_flight)
            for entry in self.models.values()
            for version, ventry in entry.versions.items()
            if ventry.model is not None and ventry.model.busy
        ]

    def close(self) -> None:
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


__all__ = ["ModelRegistry"]
