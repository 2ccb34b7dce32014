"""What the registry shows: the repository index rows, and the startup tables of models and backends."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from modelhost.backends.registry import backend_module
from modelhost.config.normalize import is_ensemble
from modelhost.engine.registry.entries import ModelEntry, ModelState, display_name


def index_rows(
    models: Mapping[str, ModelEntry],
    scanned: Mapping[str, list[Path]],
    ready_only: bool,
    *,
    with_memory: bool,
) -> list[dict[str, str | int]]:
    """The repository index rows; `with_memory` (under --model-memory-budget) a loaded version's also says what
    it takes in memory (`memory_bytes`, modelhost's addition to Triton's fields), and a version the server
    unloaded on its own (the budget, --model-idle-unload-secs) says when and why (`evicted`)."""
    rows: list[dict[str, str | int]] = []
    names = set(models)
    if not ready_only:
        names |= set(scanned)  # models in the repository that were never loaded: their name only
    # By name; a name several repositories hold (--model-namespacing) once per repository, each row by its name.
    for key in sorted(names, key=lambda k: (display_name(k), k)):
        name = display_name(key)
        entry = models.get(key)
        if (
            entry is not None
            and key not in scanned
            and not any(v.model is not None for v in entry.versions.values())
        ):
            continue  # gone from the repository (or loaded from overrides) and unloaded: not listed, as Triton
        if entry is None or (not entry.error and not entry.versions):
            if not ready_only:
                rows.append({"name": name})
            continue
        if entry.error:
            if not ready_only:
                rows.append({"name": name, "state": ModelState.UNAVAILABLE.value, "reason": entry.error})
            continue
        for version, ventry in entry.versions.items():
            if ready_only and ventry.state != ModelState.READY:
                continue
            row: dict[str, str | int] = {"name": name, "version": str(version), "state": ventry.state.value}
            if ventry.reason:
                row["reason"] = ventry.reason
            if ventry.model is not None and with_memory:
                # Only under a budget: rows stay exactly Triton's otherwise (clients compare them whole).
                row["memory_bytes"] = ventry.model.stats.memory_bytes
            if entry.evicted:
                # Only after the server unloaded a model on its own, which needs one of modelhost's flags.
                row["evicted"] = entry.evicted
            rows.append(row)
    return rows


def status_rows(index: list[dict[str, str | int]]) -> list[tuple[str, str, str]]:
    """(model, version, status) for the startup table, as Triton prints it, from the index rows."""
    rows: list[tuple[str, str, str]] = []
    for item in index:
        if "state" not in item:
            continue  # not loaded (explicit mode)
        status = f"{item['state']}" + (f": {item['reason']}" if item.get("reason") else "")
        rows.append((str(item["name"]), str(item.get("version", "-")), status))
    return rows


def backend_rows(
    entries: Iterable[ModelEntry], settings_of: Callable[[str], dict[str, str]]
) -> list[tuple[str, str, str]]:
    """(backend, where it lives, its --backend-config settings) for the backends of the loaded models, as
    Triton's startup table of backends."""
    rows: dict[str, tuple[str, str, str]] = {}
    for entry in entries:
        if not entry.serving() or is_ensemble(entry.config):
            continue
        name = entry.config.backend or entry.config.platform
        settings = settings_of(name)
        config = json.dumps({"cmdline": settings}, sort_keys=True) if settings else "{}"
        rows.setdefault(name, (name, backend_module(name), config))
    return sorted(rows.values())
