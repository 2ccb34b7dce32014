"""The repositories as the registry sees them: their local copies, the model directories by name (models
registered by name included), and --model-namespacing's keys for a name several repositories hold."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from modelhost.config import config_path, read_config
from modelhost.engine.registry.entries import LoadSettings
from modelhost.errors import InvalidArgument, ModelConfigError, ModelhostError
from modelhost.repository.fingerprint import ModelFingerprint, fingerprint
from modelhost.repository.layout import model_directories
from modelhost.repository.sources import RepositoryError, RepositorySource

log = logging.getLogger("modelhost.registry")

# What a load saw of a model's files: its directories, and their fingerprint where there is one directory.
Seen = tuple[tuple[Path, ...], ModelFingerprint | None]
# Model directories by registry key.
Scanned = dict[str, list[Path]]


def steps_in_files(dirs: list[Path], model: str, config_name: str | None) -> list[str]:
    """The models an ensemble's steps name, read from its config file alone ([] for other models, or where the
    file cannot be read: its own load reports that)."""
    path = config_path(dirs[0], config_name) if len(dirs) == 1 else None
    if path is None:
        return []
    try:
        found = read_config(path, model)
    except ModelhostError:
        return []
    return [s.model_name for s in found.ensemble_scheduling.step]


class Catalog:
    __slots__ = ("_roots", "ambiguous", "registered", "settings", "sources")

    def __init__(
        self, sources: list[RepositorySource], settings: LoadSettings, ambiguous: dict[str, list[str]]
    ) -> None:
        """`ambiguous`: the table's map of shared names to keys, which each scan keeps current."""
        self.sources = sources
        self.settings = settings
        self._roots: list[Path | None] = [None] * len(sources)
        # Models registered by name from a directory outside the repositories (SageMaker's POST /models).
        self.registered: dict[str, Path] = {}
        self.ambiguous = ambiguous

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

    def scan(self) -> Scanned:
        """Model directories by name, over every repository (a name may be in several: an error at load)."""
        found: Scanned = {}
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
            self.ambiguous.clear()
            self.ambiguous.update(
                {name: [str(d) for d in dirs] for name, dirs in found.items() if len(dirs) > 1}
            )
            for name, keys in self.ambiguous.items():
                del found[name]
                for key in keys:
                    found[key] = [Path(key)]
        return found

    def keys_of(self, name: str) -> list[str]:
        """The registry keys a name asked for stands for: itself, or under --model-namespacing every
        repository's model of that name (a load or unload by name acts on them all, as in Triton)."""
        return list(self.ambiguous.get(name, [name]))

    def keys_now(self, name: str) -> list[str]:
        """`keys_of` after a scan: the names the repositories share now."""
        self.scan()
        return self.keys_of(name)

    def namespace(self, model_dir: Path) -> str:
        """The namespace statistics and the response cache key a model by (--model-namespacing)."""
        return str(model_dir.parent) if self.settings.namespacing else ""

    def resolve_steps(self, config: Any, model_dir: Path) -> None:
        """Under --model-namespacing, an ensemble's step naming a model several repositories hold is its own
        repository's (Triton sets the step's model_namespace so): the step then names that model's key."""
        if not self.ambiguous:
            return
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

    def steps_in_files(self, model: str, scanned: Scanned) -> list[str]:
        """The models an ensemble's steps name, from its config file alone (steps_in_files), as keys."""
        dirs = scanned.get(model, [])
        steps = steps_in_files(dirs, model, self.settings.config_name)
        if not self.ambiguous or len(dirs) != 1:
            return steps
        # --model-namespacing: a shared name in a step is the ensemble's own repository's model (its key).
        return [str(dirs[0].parent / s) if s in self.ambiguous else s for s in steps]

    @staticmethod
    def model_dir(name: str, dirs: list[Path]) -> Path:
        """The one directory of a model; an error where there is none or more than one."""
        if not dirs:
            raise InvalidArgument("model not found in any model repository")
        if len(dirs) > 1:
            where = ", ".join(str(p.parent) for p in dirs)
            raise InvalidArgument(f"model '{name}' appears in multiple model repositories: {where}")
        return dirs[0]

    @staticmethod
    async def look(dirs: list[Path]) -> Seen:
        """What a model's files are now: a load or poll compares it with what the last load saw."""
        fp = await asyncio.to_thread(fingerprint, dirs[0]) if len(dirs) == 1 else None
        return tuple(dirs), fp


__all__ = ["Catalog", "Scanned", "Seen"]
