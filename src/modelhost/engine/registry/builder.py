"""Building one version of a model: its configuration read (repository agents first), its instances built and
warmed up (retried --model-load-retry-count times, measured, under the memory budget where there is one), an
ensemble's scheduler, and a serving version's instances changed in place (instance_update.py says which).

Blocking work (reading configs, building runtime sessions) runs on worker threads; the builder itself is only
called from the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from modelhost.backends.api import BackendContext, BackendServices, ModelInstance
from modelhost.backends.model_config import complete_model_config, load_model_config
from modelhost.config import config_from_json, config_path, read_config
from modelhost.engine.classification import read_labels
from modelhost.engine.ensemble.plan import EnsemblePlan
from modelhost.engine.ensemble.scheduler import EnsembleScheduler
from modelhost.engine.model import LoadedModel
from modelhost.engine.registry.budget import MemoryBudget
from modelhost.engine.registry.build import built_instances, close_all, instance_plan, load_error
from modelhost.engine.registry.entries import LoadSettings, ModelEntry, display_name
from modelhost.engine.registry.instance_update import (
    free_index,
    only_instance_groups_differ,
    plan_change,
    signature,
)
from modelhost.engine.registry.model_memory import Footprint, sample
from modelhost.engine.registry.table import ModelTable
from modelhost.engine.registry.warmup import run_warmup
from modelhost.engine.scheduling.instances import InstancePool
from modelhost.engine.scheduling.rate_limiter import InstanceNeeds, needs_of
from modelhost.errors import OutOfMemory
from modelhost.host.gpu_memory import check_load_limit
from modelhost.repository.agents import run_repository_agents
from modelhost.repository.overrides import LoadOverride

log = logging.getLogger("modelhost.registry")

PlanItem = tuple[Any, int, int]


class VersionBuilder:
    __slots__ = ("budget", "load_slots", "services", "settings", "table")

    def __init__(
        self,
        settings: LoadSettings,
        table: ModelTable,
        services: BackendServices,
        budget: MemoryBudget | None,
    ) -> None:
        self.settings = settings
        self.table = table
        # What backends may use of the running server (python models call other models).
        self.services = services
        self.budget = budget
        # At most --model-load-thread-count versions build at once.
        self.load_slots = asyncio.Semaphore(max(1, settings.load_threads))

    # -- the configuration -------------------------------------------------------------------------------------

    def run_agents(self, model_dir: Path, override: LoadOverride | None, name: str) -> None:
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

    def read_config(self, model_dir: Path, override: LoadOverride | None, name: str = "") -> Any:
        """The completed configuration: the override's, or the repository's."""
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

    # -- a version with instances ------------------------------------------------------------------------------

    async def build(
        self, name: str, version: int, model_dir: Path, config: Any, backend: Any, namespace: str
    ) -> LoadedModel:
        """Load one version (its instances, then warmup), retried --model-load-retry-count times."""
        attempts = 1 + max(0, self.settings.load_retries)
        log.info("loading: %s:%d", name, version)  # Triton's line, which log scrapers wait for
        for attempt in range(1, attempts + 1):
            started = time.monotonic()
            try:
                async with self.load_slots:
                    if self.budget is None:
                        model = await self._measured(name, version, model_dir, config, backend, namespace)
                    else:
                        model = await self.budget.fit(
                            name,
                            version,
                            model_dir,
                            lambda: self._measured(name, version, model_dir, config, backend, namespace),
                        )
            except Exception as e:  # a backend fault at load fails this version only
                error = load_error(name, version, e)
                if isinstance(error, OutOfMemory):
                    break  # more memory will not appear by trying again
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

    async def _measured(
        self, name: str, version: int, model_dir: Path, config: Any, backend: Any, namespace: str
    ) -> LoadedModel:
        """Build a version and record what it takes: the memory of the process tree before and after."""
        devices = self._devices(config)
        before = await asyncio.to_thread(sample, devices)
        model = await asyncio.to_thread(self._load_version, name, version, model_dir, config, backend, namespace)
        after = await asyncio.to_thread(sample, devices)
        footprint = Footprint.between(before, after)
        model.stats.memory_bytes = footprint.host
        model.stats.gpu_memory_bytes = footprint.gpus
        return model

    def _devices(self, config: Any) -> list[int]:
        if not self.settings.gpu_count:
            return []
        plan = instance_plan(config, self.settings.gpu_count)
        return sorted({device for group, _, device in plan if group.kind == group.KIND_GPU})

    def _context(self, name: str, version: int, model_dir: Path, config: Any, backend: Any) -> BackendContext:
        return BackendContext(
            model_name=display_name(name),
            version=version,
            model_dir=model_dir,
            version_dir=model_dir / str(version),
            config=config,
            backend_config=self.settings.backend_settings(backend.name),
            total_instances=len(instance_plan(config, self.settings.gpu_count)),
            gpu_count=self.settings.gpu_count,
            gpu_memory=self.settings.gpu_memory,
            services=self.services,
        )

    def _new_instances(self, ctx: BackendContext, backend: Any, plan: list[PlanItem]) -> list[ModelInstance]:
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
            close_all(instances)
            raise
        return instances

    def _needs(self, plan: list[PlanItem]) -> list[InstanceNeeds] | None:
        limiter = self.settings.rate_limiter
        return [needs_of(group, device) for group, _, device in plan] if limiter is not None else None

    def _load_version(
        self, name: str, version: int, model_dir: Path, config: Any, backend: Any, namespace: str
    ) -> LoadedModel:
        plan = instance_plan(config, self.settings.gpu_count)
        instances = self._new_instances(
            self._context(name, version, model_dir, config, backend), backend, plan
        )
        try:
            # fails where the limiter cannot serve them
            pool = InstancePool(instances, self.settings.rate_limiter, self._needs(plan))
        except BaseException:
            close_all(instances)
            raise
        return LoadedModel(
            display_name(name),
            version,
            config,
            model_dir,
            pool,
            namespace=namespace,
            cached=self.settings.response_cache and bool(config.response_cache.enable),
            placements=[(signature(g, d), i) for (g, _, d), i in zip(plan, instances, strict=True)],
        )

    # -- an ensemble -------------------------------------------------------------------------------------------

    def build_ensemble(
        self, name: str, version: int, model_dir: Path, config: Any, composing: dict[str, Any], namespace: str
    ) -> LoadedModel:
        """An ensemble's version: its plan over the composing models' configs, scheduled by EnsembleScheduler."""
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
            namespace=namespace,
            # A decoupled ensemble is not cached (as a decoupled model: refused at load by Triton).
            cached=self.settings.response_cache and bool(config.response_cache.enable) and not plan.decoupled,
            inherited_labels=self._ensemble_labels(config, composing),
        )
        model.stats.load_duration_s = time.monotonic() - started
        log.info("loaded '%s' version %d", name, version)
        return model

    def _ensemble_labels(self, config: Any, composing: dict[str, Any]) -> dict[str, list[str]]:
        """The labels of the composing models' outputs an ensemble's outputs come from: an ensemble output
        without labels of its own classifies with those, as Triton completes an ensemble's label provider."""
        inherited: dict[str, list[str]] = {}
        for step in config.ensemble_scheduling.step:
            entry: ModelEntry | None = self.table.models.get(step.model_name)
            if entry is None or entry.model_dir is None:
                continue
            for produced, tensor in step.output_map.items():
                spec = next((o for o in composing[step.model_name].output if o.name == produced), None)
                if tensor not in inherited and spec is not None and spec.label_filename:
                    inherited[tensor] = read_labels(entry.model_dir, spec.label_filename)
        return inherited

    # -- instance updates in place -----------------------------------------------------------------------------

    def regroups_in_place(self, model: LoadedModel | None, old: Any, new: Any) -> bool:
        """Whether a reload from config `old` to `new` adds and removes instances of the serving `model` instead
        of loading it anew (instance_update.py): only the instance groups changed, and whether the rate limiter
        governs its instances stays as it was."""
        if model is None or model.ensemble is not None or not only_instance_groups_differ(old, new):
            return False
        needs = self._needs(instance_plan(new, self.settings.gpu_count))
        return model.pool.rate_limited == (needs is not None and any(n.resources for n in needs))

    async def regroup(self, model: LoadedModel, config: Any, backend: Any) -> None:
        """Add and remove instances of a serving version for the instance groups of `config`. The version serves
        throughout; nothing changes when a new instance fails to load or the rate limiter cannot serve it."""
        plan = instance_plan(config, self.settings.gpu_count)
        change = plan_change(model.placements, plan, model.sequences_by_instance())
        taken = {i.name for i in model.pool.instances}
        add = [(group, free_index(group, index, taken), device) for group, index, device in change.add]
        added: list[ModelInstance] = []
        if add:
            ctx = self._context(model.name, model.version, model.model_dir, config, backend)
            async with self.load_slots:
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
            self.table.track(task)
        if now:
            await asyncio.gather(*now)


__all__ = ["VersionBuilder"]
