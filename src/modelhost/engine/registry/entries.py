"""What the registry knows of each model and version: states, entries, the load settings, the version policy."""

from __future__ import annotations

import enum
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from modelhost.backends.registry import backend_settings
from modelhost.engine.model import LoadedModel
from modelhost.engine.scheduling.rate_limiter import RateLimiter
from modelhost.host.gpu_memory import GpuMemory
from modelhost.host.host_policy import Placement
from modelhost.repository.fingerprint import ModelFingerprint

ControlMode = Literal["none", "poll", "explicit"]


def display_name(key: str) -> str:
    """A model's name from its registry key. The key is the name, except under --model-namespacing for a name
    several repositories hold: the model's directory then (a path, which no model name can be)."""
    return Path(key).name if "/" in key else key


UNLOADED = "unloaded"


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
    fingerprint: str = ""  # of the version directory this version was loaded from


@dataclass(slots=True)
class ModelEntry:
    name: str
    model_dir: Path | None = None  # where the serving versions were loaded from
    # A failure before any version could be considered (bad config, duplicate name, no versions).
    error: str = ""
    config: Any = None
    versions: dict[int, VersionEntry] = field(default_factory=dict)
    shared_fingerprint: str = ""
    shared_besides_config: str = ""  # the fingerprint of the shared files but the configuration
    # Loaded with file overrides: its files are not the repository's, so an unchanged repository is no reason
    # to keep it on the next load.
    overridden: bool = False
    # Loaded with a config override alone: the override and what the repository held then. A later load without
    # one keeps it while the repository is unchanged, as Triton does.
    retained: tuple[str, Any] | None = None
    override_dir: tempfile.TemporaryDirectory[str] | None = None
    # What the last load attempt saw (success or failure): a poll retries a model only when this changes.
    seen: tuple[tuple[Path, ...], ModelFingerprint | None] | None = None
    # Loaded only because an ensemble needed it (not asked for by name): `unload_dependents` on that ensemble
    # unloads it again, as Triton does.
    for_ensemble: bool = False
    # Why and when the server unloaded it on its own (the memory budget, idleness), until it is loaded or
    # unloaded on request: the index's `evicted` note, what the console shows as evicted lately.
    evicted: str = ""

    def serving(self) -> list[VersionEntry]:
        return [v for v in self.versions.values() if v.state == ModelState.READY and v.model is not None]

    def serving_versions(self) -> list[int]:
        return [v.version for v in self.serving()]


@dataclass(frozen=True, slots=True)
class LoadSettings:
    config_name: str | None = None
    auto_complete: bool = True
    # --backend-config, by backend name ("" = global settings).
    backend_config: dict[str, dict[str, str]] = field(default_factory=dict)
    gpu_count: int = 0
    gpu_memory: GpuMemory = field(default_factory=GpuMemory)
    load_threads: int = 4
    load_retries: int = 0
    # --rate-limit=execution_count: the server-wide limiter (None: off).
    rate_limiter: RateLimiter | None = None
    # --cache-config given: models with `response_cache { enable: true }` use the server's response cache.
    response_cache: bool = False
    # --model-memory-budget in bytes: what loaded model versions may take together (None: no budget).
    memory_budget: int | None = None
    # --model-load-on-demand (explicit mode): a request for a model of the repositories that is not loaded
    # loads it first.
    load_on_demand: bool = False
    # --host-policy, checked against this host: policy name -> where its instances run (host/host_policy.py).
    host_policies: dict[str, Placement] = field(default_factory=dict)
    # --model-namespacing: a name may be in several repositories, each model its repository's.
    namespacing: bool = False

    def backend_settings(self, backend: str) -> dict[str, str]:
        return backend_settings(self.backend_config, backend)


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
