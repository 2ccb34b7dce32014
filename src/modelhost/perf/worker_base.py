"""What the HTTP and gRPC load generators share: the recorder, the sequence ids and slots, the open-loop rate
(constant or poisson) and stopping it."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time

from modelhost.perf.recorder import Recorder
from modelhost.perf.sequences import IdAllocator, SequenceSlot
from modelhost.perf.specs import WorkerSpec


class Worker:
    """One process's load: set_concurrency keeps n requests in flight (closed loop), start_rate calls fire() at
    each due time (open loop); stop ends either, close ends the connections too."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.requests = spec.requests
        self.next_index = 0
        self.recorder = Recorder(spec.streaming)
        self.rate_task: asyncio.Task[None] | None = None
        self.ids: IdAllocator | None = None
        self.rng = random.Random(spec.process_index)
        self.stream_index = [spec.process_index]
        if spec.sequence is not None:
            self.ids = IdAllocator(spec.sequence, spec.process_index, spec.process_count)
            self.stream_index = [spec.process_index % len(spec.sequence.templates)]

    def new_slot(self) -> SequenceSlot | None:
        if self.spec.sequence is None or self.ids is None:
            return None
        return SequenceSlot(self.spec.sequence, self.ids, self.rng, self.stream_index)

    async def set_concurrency(self, n: int) -> None:
        raise NotImplementedError

    async def start_rate(self, rate: float, distribution: str, seed: int) -> None:
        await self.stop()
        self.rate_task = asyncio.get_running_loop().create_task(self._rate_loop(rate, distribution, seed))

    async def _rate_loop(self, rate: float, distribution: str, seed: int) -> None:
        rng = random.Random(seed)
        interval_ns = 1e9 / rate
        next_at = float(time.monotonic_ns())
        while True:
            now = time.monotonic_ns()
            while next_at <= now:
                self.fire()
                next_at += rng.expovariate(1.0) * interval_ns if distribution == "poisson" else interval_ns
            await asyncio.sleep((next_at - time.monotonic_ns()) / 1e9)

    def fire(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        if self.rate_task is not None:
            self.rate_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.rate_task
            self.rate_task = None

    async def close(self) -> None:
        await self.stop()
