"""The memory budget and eviction: what loaded versions take, whether a load fits under --model-memory-budget,
which idle model goes first to make room (the least recently used), and --model-idle-unload-secs. Only models
loaded in explicit mode, not pinned by --load-model, idle, and used by no loaded ensemble may be unloaded."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from modelhost.config.normalize import is_ensemble
from modelhost.engine.model import LoadedModel
from modelhost.engine.registry.ensembles import dependents
from modelhost.engine.registry.entries import ControlMode, ModelEntry
from modelhost.engine.registry.model_memory import files_size
from modelhost.engine.registry.table import ModelTable
from modelhost.errors import OutOfMemory

log = logging.getLogger("modelhost.registry")


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


def _now_utc() -> str:
    """Now, as the repository index's `evicted` notes give it (UTC, to the second)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class MemoryBudget:
    """Which models the server unloads on its own, and when: to make room under --model-memory-budget (`limit`;
    None: no budget), and after --model-idle-unload-secs without a request."""

    __slots__ = ("_fitting", "last_size", "limit", "mode", "pinned", "table")

    def __init__(self, limit: int | None, table: ModelTable, mode: ControlMode) -> None:
        self.limit = limit
        self.table = table
        self.mode = mode
        # Models never unloaded to make room or for idleness: those --load-model named (explicit mode).
        self.pinned: set[str] = set()
        # The last measured host bytes of each model's versions: the estimate for its next load.
        self.last_size: dict[str, int] = {}
        # Under a budget, loads run one at a time: each load's memory delta is then its own.
        self._fitting = asyncio.Lock()

    def in_use(self, *, besides: str = "") -> int:
        """Host bytes the loaded model versions take (all but those of `besides`)."""
        return memory_in_use(self.table.models.values(), besides)

    async def fit(
        self, name: str, version: int, model_dir: Path, build: Callable[[], Awaitable[LoadedModel]]
    ) -> LoadedModel:
        """Build a version (`build`) under the budget: make room first (idle models, least recently used first)
        for what it is expected to take, then check what it took. The versions of `name` itself do not count:
        a reload replaces them."""
        async with self._fitting:
            expected = self.last_size.get(name)
            if expected is None:
                expected = await asyncio.to_thread(files_size, model_dir / str(version))
            # A load that could never fit fails here, before anything is unloaded for it.
            self._check_fits(name, version, expected, "needs at least")
            await self._make_room(expected, besides=name)
            model = await build()
            needed = self.last_size[name] = model.stats.memory_bytes
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
        assert self.limit is not None
        kept = self.in_use(besides=name)
        if unloadable:
            kept -= serving_bytes(e for e in self.table.models.values() if self.unloadable(e, name))
        check_fits(name, version, needed, verb, kept, self.limit)

    def unloadable(self, entry: ModelEntry, besides: str) -> bool:
        """Whether a model may be unloaded to make room or for idleness: loaded in explicit mode, not pinned,
        not loading or unloading, no request queued or in flight, and no loaded ensemble using it."""
        if self.mode != "explicit" or entry.name in (besides, *self.pinned):
            return False
        serving = entry.serving()
        if (
            not serving
            or self.table.lock(entry.name).locked()
            or entry.config is None
            or is_ensemble(entry.config)
        ):
            return False
        if any(v.model is not None and v.model.busy for v in serving):
            return False
        return not dependents(entry.name, self.table.models.values())

    async def _make_room(self, needed: int, *, besides: str) -> None:
        """Unload idle models, least recently used first, until `needed` more bytes fit in the budget or
        nothing more may be unloaded."""
        budget = self.limit
        assert budget is not None
        while self.in_use(besides=besides) + needed > budget:  # never true without candidates left
            candidates = [e for e in self.table.models.values() if self.unloadable(e, besides)]
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
        async with self.table.lock(name):
            entry = self.table.models.get(name)
            task = self.table.unload(entry, evicted=evicted) if entry is not None else None
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    async def unload_idle(self, idle_s: float) -> list[str]:
        """Unload the models no request used for `idle_s` seconds (--model-idle-unload-secs)."""
        now_ms = time.time() * 1000
        idle = [
            e.name
            for e in list(self.table.models.values())
            if self.unloadable(e, "") and now_ms - last_used_ms(e) >= idle_s * 1000
        ]
        for name in idle:
            entry = self.table.models.get(name)
            if entry is not None and self.unloadable(entry, ""):
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
