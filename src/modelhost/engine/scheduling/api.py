"""What a loaded model version sends its requests through: a scheduler in front of its instances (a dynamic or
sequence batcher), or in place of them (an ensemble's steps). Without one, a request runs alone on the first free
instance of the pool (`InstancePool.execute`)."""

from __future__ import annotations

from typing import Protocol

from modelhost.backends.api import Arrays, Job


class Scheduler(Protocol):
    """What stands between a model's requests and its instances (a batcher), or in place of them (an ensemble)."""

    async def execute(self, job: Job, priority: int, timeout_us: int) -> Arrays: ...

    def queued(self) -> int: ...


class Ensemble(Scheduler, Protocol):
    def ready(self) -> bool: ...
