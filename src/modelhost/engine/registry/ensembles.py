"""Ensembles in the registry: the models an ensemble's steps name, read from config files alone (the models on a
cycle cannot be loaded to find out), cycles, the order a startup loads models in, and the loaded ensembles that
depend on a model."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from modelhost.config import config_path, read_config
from modelhost.config.normalize import is_ensemble
from modelhost.engine.registry.entries import ModelEntry
from modelhost.errors import ModelhostError

StepsOf = Callable[[str], list[str]]


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


def ensemble_cycle(name: str, config: Any, steps_of: StepsOf) -> list[str]:
    """The names along a cycle through `name` of ensembles naming each other, or []."""

    def walk(model: str, steps: list[str], path: list[str]) -> list[str]:
        for step in steps:
            if step == name:
                return [*path, model, step]
            if step not in path and step != model:
                found = walk(step, steps_of(step), [*path, model])
                if found:
                    return found
        return []

    return walk(name, [s.model_name for s in config.ensemble_scheduling.step], [])


def dependency_layers(names: list[str], steps_of: StepsOf) -> list[list[str]]:
    """`names` in layers: those naming no other model of `names` first, then those whose steps are all in
    earlier layers, and so on (what is left, on a cycle, last: its load reports the cycle)."""
    steps = {name: set(steps_of(name)) & set(names) for name in names}
    layers: list[list[str]] = []
    placed: set[str] = set()
    while len(placed) < len(names):
        layer = [n for n in names if n not in placed and steps[n] <= placed]
        if not layer:
            layer = [n for n in names if n not in placed]
        layers.append(layer)
        placed.update(layer)
    return layers


def dependents(name: str, entries: Iterable[ModelEntry]) -> list[str]:
    """The loaded ensembles with a step naming `name`, and those naming them, and so on."""
    entries = list(entries)
    found: list[str] = []
    todo = [name]
    while todo:
        current = todo.pop()
        for entry in entries:
            if entry.name in found or not entry.serving() or not is_ensemble(entry.config):
                continue
            if any(s.model_name == current for s in entry.config.ensemble_scheduling.step):
                found.append(entry.name)
                todo.append(entry.name)
    return found
