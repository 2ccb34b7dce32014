"""--model-memory-budget: what loaded versions take, whether a load fits, and which idle model goes first (the
least recently used). The registry decides which models may be unloaded (its locks, pins and ensembles)."""

from __future__ import annotations

from collections.abc import Iterable

from modelhost.engine.registry.entries import ModelEntry
from modelhost.errors import OutOfMemory


def memory_in_use(entries: Iterable[ModelEntry], besides: str = "") -> int:
    """Host bytes the loaded versions take (those closing included), all but those of `besides`."""
    return sum(
        v.model.stats.memory_bytes
        for entry in entries
        if entry.name != besides
        for v in entry.versions.values()
        if v.model is not None
    )


def serving_bytes(entries: Iterable[ModelEntry]) -> int:
    """Host bytes the serving versions of these models take: what unloading them gives back."""
    return sum(v.model.stats.memory_bytes for e in entries for v in e.serving() if v.model is not None)


def check_fits(name: str, version: int, needed: int, verb: str, kept: int, budget: int) -> None:
    """Raise OutOfMemory when `needed` more bytes do not fit beside the `kept` ones."""
    if kept + needed > budget:
        raise OutOfMemory(
            f"model '{name}' version {version} {verb} {needed} bytes of memory and does not fit in "
            f"--model-memory-budget={budget}: {kept} bytes are taken by models that cannot be unloaded "
            "(pinned with --load-model, in use, or used by a loaded ensemble)"
        )


def last_used_ms(entry: ModelEntry) -> int:
    """When a model last served a request (or was loaded): the least recently used goes first."""
    return max(
        (max(v.model.stats.last_inference_ms, v.model.loaded_at_ms) for v in entry.serving() if v.model),
        default=0,
    )
