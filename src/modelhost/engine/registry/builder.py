"""Building one version of a model: its configuration read (repository agents first), its instance plan, its
instances built (one after the other, or in parallel) and warmed up (retried --model-load-retry-count times,
measured, under the memory budget where there is one), an ensemble's scheduler, a serving version's instances
changed in place (instance_update.py says which), and a fault while building as the error that fails the version.

Blocking work (reading configs, building runtime sessions) runs on worker threads; the builder itself is only
called from the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Mapping
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
from modelhost.engine.registry.entries import LoadSettings, ModelEntry, display_name
from modelhost.engine.registry.instance_update import (
    free_index,
    only_instance_groups_differ,
    plan_change,
    signature,
)
from modelhost.engine.registry.model_memory import Footprint, is_out_of_memory, sample
from modelhost.engine.registry.table import ModelTable
from modelhost.engine.registry.warmup import run_warmup
from modelhost.engine.scheduling.instances import InstancePool
from modelhost.engine.scheduling.rate_limiter import InstanceNeeds, needs_of
from modelhost.errors import ModelhostError, OutOfMemory
from modelhost.host.gpu_memory import check_load_limit
from modelhost.host.host_policy import Placement, bound, policy_name, remember
from modelhost.repository.agents import run_repository_agents
from modelhost.repository.overrides import LoadOverride

log = logging.getLogger("modelhost.registry")

# (instance group, index within the group, device id): one instance a configuration asks for
PlanItem = tuple[Any, int, int]


def instance_plan(config: Any, gpu_count: int) -> list[tuple[Any, int, int]]:
    """(group, index within group, device id) for every instance the config asks for."""
    plan: list[tuple[Any, int, int]] = []
    for group in config.instance_group:
        kind = group.DESCRIPTOR.fields_by_name["kind"].enum_type.values_by_number[group.kind].name
        count = max(1, int(group.count))
        if kind == "KIND_GPU":
            gpus = list(group.gpus) or list(range(gpu_count)) or [0]
            for gpu in gpus:
                plan.extend((group, i, gpu) for i in range(count))
        else:
            plan.extend((group, i, 0) for i in range(count))
    return plan


def load_error(name: str, version: int, error: BaseException) -> ModelhostError:
    """A fault while loading a version as the error that fails it: out of memory where it says so."""
    if isinstance(error, OutOfMemory):
        return error
    if isinstance(error, MemoryError):
        return OutOfMemory(f"MemoryError: out of memory while loading '{name}' version {version}")
    if isinstance(error, ModelhostError):
        return OutOfMemory(str(error)) if is_out_of_memory(str(error)) else error
    log.exception("failed to load '%s' version %d", name, version, exc_info=error)
    message = f"{type(error).__name__}: {error}"
    return OutOfMemory(message) if is_out_of_memory(message) else ModelhostError(message)


def fault_as_error(build: Callable[..., LoadedModel], *args: Any) -> LoadedModel:
    """A fault while building a model version fails that version only, with the fault as its reason."""
    try:
        return build(*args)
    except ModelhostError:
        raise
    except Exception as e:
        log.exception("failed to build model '%s'", args[0])
        raise ModelhostError(f"{type(e).__name__}: {e}") from e


def built_instances(
    backend: Any,
    ctx: BackendContext,
    plan: list[tuple[Any, int, int]],
    host_policies: Mapping[str, Placement] | None = None,
) -> list[Any]:
    """The instances of the plan, in its order: built one after the other, or all at once on threads of their
    own for a backend with `parallel_instances` (a python model's instances each initialize in their own
    process), as Triton builds them. Where one fails, those built are closed and its error raised.

    `host_policies`: an instance whose group follows one is built on a thread bound to it (what the framework
    starts meanwhile, its thread pools or a stub process, inherits it), and remembered for its worker thread."""
    policies = host_policies or {}

    def build(group: Any, index: int, device: int) -> Any:
        placement = policies.get(policy_name(group, device))
        with bound(placement):
            instance = backend.load_instance(ctx, group, index, device)
        remember(instance, placement)
        return instance

    if len(plan) < 2 or not getattr(backend, "parallel_instances", False):
        built: list[Any] = []
        try:
            for group, index, device in plan:
                built.append(build(group, index, device))
        except BaseException:
            for instance in built:
                instance.close()
            raise
        return built
    with concurrent.futures.ThreadPoolExecutor(
        len(plan), thread_name_prefix=f"load-{ctx.model_name}"
    ) as pool:
        futures = [pool.submit(build, g, i, d) for g, i, d in plan]
        concurrent.futures.wait(futures)
    errors = [e for e in (f.exception() for f in futures) if e is not None]
    if errors:
        for future in futures:
            if future.exception() is None:
                future.result().close()
        raise errors[0]
    return [future.result() for future in futures]


def close_all(instances: list[ModelInstance]) -> None:
    for instance in instances:
        instance.close()


def same_but_version_policy(old: Any, new: Any) -> bool:
    """Triton loads a serving version again on a configuration change other than its version_policy (and its
    instance groups, which it updates in place: `VersionBuilder.regroup`)."""
    if old is None:
        return False
    if old.version_policy == new.version_policy:
        return bool(old == new)
    left, right = type(old)(), type(new)()
    left.CopyFrom(old)
    right.CopyFrom(new)
    left.ClearField("version_policy")
    right.ClearField("version_policy")
    return bool(left == right)


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
        unlabelled = {o.name for o in config.output if not o.label_filename}  # the outputs that inherit
        inherited: dict[str, list[str]] = {}
        for step in config.ensemble_scheduling.step:
            entry: ModelEntry | None = self.table.models.get(step.model_name)
            if entry is None or entry.model_dir is None:
                continue
            for produced, tensor in step.output_map.items():
                spec = next((o for o in composing[step.model_name].output if o.name == produced), None)
                if tensor in unlabelled and tensor not in inherited and spec is not None and spec.label_filename:
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
