"""Models loaded under another name (SageMaker's multi-model API, `register_models` of the EngineAPI): an alias
names its target model, the url it was loaded from and the model names it registered (the target and an
ensemble's companions). Those names point at their directories in the registry until the alias is forgotten."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from modelhost.engine.registry.registry import ModelRegistry
from modelhost.errors import Conflict


class ModelAliases:
    __slots__ = ("_aliases", "_registry")

    def __init__(self, registry: ModelRegistry) -> None:
        self._registry = registry
        # alias -> {"target": model name, "url": where it was loaded from, "names": the names it registered}
        self._aliases: dict[str, dict[str, Any]] = {}

    def register(self, alias: str, url: str, names: dict[str, str]) -> None:
        """Register the model directories `names` (model name -> directory) under `alias`; the first name is its
        target. Conflict when the alias or a name is taken."""
        registry = self._registry
        first, *others = names
        if alias in self._aliases or first in registry.registered:
            raise Conflict(f"failed to register '{first}', there is a conflicting mapping for '{first}'")
        scanned = registry.scan()  # the repositories' models, and those registered by earlier loads
        # The first name's mapping takes precedence over a repository model of that name, as in Triton (which
        # then loads it from its directory); the others must not clash with any model of their name.
        in_use = [
            n for n in others if n in scanned or ((e := registry.models.get(n)) is not None and e.serving())
        ]
        if in_use:
            what = ", ".join(f"'{n}'" for n in in_use)
            raise Conflict(f"failed to register {what}: a model of that name is already registered or loaded")
        registry.registered.update({name: Path(directory) for name, directory in names.items()})
        self._aliases[alias] = {"target": first, "url": url, "names": list(names)}

    def forget(self, alias: str) -> None:
        """Drop the alias and the names it registered (an unknown alias: nothing to do)."""
        entry = self._aliases.pop(alias, None)
        for name in [] if entry is None else entry["names"]:
            self._registry.registered.pop(name, None)

    def get(self, alias: str = "") -> dict[str, dict[str, Any]]:
        """Every alias, or the one asked for (empty when it is unknown)."""
        if alias:
            entry = self._aliases.get(alias)
            return {} if entry is None else {alias: entry}
        return dict(self._aliases)
