"""The model registry: which models and versions exist, their states, and the loaded versions that serve.

Loading is blocking work (reading files, building runtime sessions), so it runs on worker threads; the registry
itself is only touched from the event loop.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelhost.backends.base import BackendContext, ModelInstance, backend_for
from modelhost.config import load_model_config
from modelhost.errors import ModelConfigError, ModelhostError, NotFound, Unavailable
from modelhost.model import LoadedModel
from modelhost.repository.layout import model_directories, version_directories
from modelhost.scheduling.instances import InstancePool
from modelhost.warmup import run_warmup

log = logging.getLogger("modelhost.registry")


class ModelState(enum.StrEnum):
    READY = "READY"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"


@dataclass(slots=True)
class VersionEntry:
    version: int
    state: ModelState = ModelState.LOADING
    reason: str = ""
    model: LoadedModel | None = None


@dataclass(slots=True)
class ModelEntry:
    name: str
    model_dir: Path | None
    # A failure before any version could be considered (bad config, duplicate name, no versions).
    error: str = ""
    config: Any = None
    versions: dict[int, VersionEntry] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LoadSettings:
    config_name: str | None = None
    auto_complete: bool = True
    # --backend-config, by backend name ("" = global settings).
    backend_config: dict[str, dict[str, str]] = field(default_factory=dict)
    gpu_count: int = 0
    load_threads: int = 4

    def backend_settings(self, backend: str) -> dict[str, str]:
        return {**self.backend_config.get("", {}), **self.backend_config.get(backend, {})}


def select_versions(config: Any, available: list[int]) -> list[int]:
    """The versions a version policy asks for (Triton's default: the latest one)."""
    policy = config.version_policy
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        return available
    if which == "specific":
        return sorted(int(v) for v in policy.specific.versions)
    count = max(1, int(policy.latest.num_versions)) if which == "latest" else 1
    return available[-count:]


def _instance_plan(config: Any, gpu_count: int) -> list[tuple[Any, int, int]]:
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


class ModelRegistry:
    def __init__(self, repositories: list[Path], settings: LoadSettings) -> None:
        self.repositories = repositories
        self.settings = settings
        self.models: dict[str, ModelEntry] = {}

    def discover(self) -> None:
        """Find model directories; a name present in two repositories is unavailable, as in Triton."""
        seen: dict[str, list[Path]] = {}
        for repo in self.repositories:
            for name, path in model_directories(repo).items():
                seen.setdefault(name, []).append(path)
        for name, paths in sorted(seen.items()):
            if len(paths) > 1:
                where = ", ".join(str(p.parent) for p in paths)
                self.models[name] = ModelEntry(
                    name, None, error=f"model '{name}' appears in multiple model repositories: {where}"
                )
            else:
                self.models[name] = ModelEntry(name, paths[0])

    async def load_all(self) -> None:
        limit = asyncio.Semaphore(self.settings.load_threads)

        async def load(entry: ModelEntry) -> None:
            async with limit:
                await self._load_model(entry)

        await asyncio.gather(*(load(e) for e in self.models.values() if not e.error))
        for entry in self.models.values():
            if entry.error:
                log.error("failed to load '%s': %s", entry.name, entry.error)

    async def _load_model(self, entry: ModelEntry) -> None:
        assert entry.model_dir is not None
        model_dir = entry.model_dir
        settings = self.settings
        try:
            config = await asyncio.to_thread(
                load_model_config,
                model_dir,
                config_name=settings.config_name,
                auto_complete=settings.auto_complete,
                default_max_batch_size=int(
                    settings.backend_settings("onnxruntime").get("default-max-batch-size", "4")
                ),
                gpu_count=settings.gpu_count,
            )
            backend = backend_for(config)
        except ModelhostError as e:
            entry.error = str(e)
            return
        entry.config = config
        available = list(version_directories(model_dir))
        wanted = select_versions(config, available)
        if not wanted:
            entry.error = (
                f"at least one version must be available under the version policy of model '{entry.name}'"
            )
            return
        for version in wanted:
            entry.versions[version] = VersionEntry(version)
        for version in wanted:
            vdir = model_dir / str(version)
            ventry = entry.versions[version]
            if not vdir.is_dir():
                ventry.state, ventry.reason = (
                    ModelState.UNAVAILABLE,
                    f"version {version} not found in {model_dir}",
                )
                log.error("failed to load '%s' version %d: %s", entry.name, version, ventry.reason)
                continue
            started = time.monotonic()
            try:
                ventry.model = await asyncio.to_thread(
                    self._load_version, entry.name, version, config, backend
                )
            except ModelhostError as e:
                ventry.state, ventry.reason = ModelState.UNAVAILABLE, str(e)
                log.error("failed to load '%s' version %d: %s", entry.name, version, e)
                continue
            except Exception as e:  # a backend fault at load fails this version only
                ventry.state, ventry.reason = ModelState.UNAVAILABLE, f"{type(e).__name__}: {e}"
                log.exception("failed to load '%s' version %d", entry.name, version)
                continue
            ventry.state = ModelState.READY
            ventry.model.stats.load_duration_s = time.monotonic() - started
            log.info(
                "successfully loaded '%s' version %d (%.2f s)",
                entry.name,
                version,
                time.monotonic() - started,
            )

    def _load_version(self, name: str, version: int, config: Any, backend: Any) -> LoadedModel:
        model_dir = self.models[name].model_dir
        assert model_dir is not None  # set for every entry that reaches loading
        plan = _instance_plan(config, self.settings.gpu_count)
        ctx = BackendContext(
            model_name=name,
            version=version,
            model_dir=model_dir,
            version_dir=model_dir / str(version),
            config=config,
            backend_config=self.settings.backend_settings(backend.name),
            total_instances=len(plan),
            gpu_count=self.settings.gpu_count,
        )
        instances: list[ModelInstance] = []
        try:
            for group, index, device in plan:
                instances.append(backend.load_instance(ctx, group, index, device))
            run_warmup(config, model_dir, instances)  # before READY, as in Triton
        except BaseException:
            for instance in instances:
                instance.close()
            raise
        return LoadedModel(name, version, config, model_dir, InstancePool(instances))

    # -- lookups -----------------------------------------------------------------------------------------------

    def get(self, name: str, version: str = "") -> LoadedModel:
        """The version that serves a request, with Triton's messages when there is none."""
        entry = self.models.get(name)
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
        for ventry in sorted(entry.versions.values(), key=lambda v: v.version, reverse=True):
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
        for entry in self.models.values():
            if entry.error:
                return False
            if any(v.state != ModelState.READY for v in entry.versions.values()):
                return False
        return True

    def index(self, ready_only: bool = False) -> list[dict[str, str]]:
        rows: list[dict[str, str]] = []
        for name in sorted(self.models):
            entry = self.models[name]
            if entry.error:
                if not ready_only:
                    rows.append({"name": name, "state": ModelState.UNAVAILABLE.value, "reason": entry.error})
                continue
            for version, ventry in sorted(entry.versions.items()):
                if ready_only and ventry.state != ModelState.READY:
                    continue
                row = {"name": name, "version": str(version), "state": ventry.state.value}
                if ventry.reason:
                    row["reason"] = ventry.reason
                rows.append(row)
        return rows

    def status_rows(self) -> list[tuple[str, str, str]]:
        """(model, version, status) for the startup table, as Triton prints it."""
        rows: list[tuple[str, str, str]] = []
        for item in self.index():
            status = item["state"] + (f": {item['reason']}" if item.get("reason") else "")
            rows.append((item["name"], item.get("version", "-"), status))
        return rows

    def close(self) -> None:
        for entry in self.models.values():
            for ventry in entry.versions.values():
                if ventry.model is not None:
                    ventry.model.close()
                    ventry.model = None
                ventry.state, ventry.reason = ModelState.UNAVAILABLE, "unloaded"


__all__ = ["LoadSettings", "ModelConfigError", "ModelRegistry", "ModelState", "select_versions"]
