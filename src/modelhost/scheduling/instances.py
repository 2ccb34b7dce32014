"""A pool of model instances, each owned by its own worker thread; requests go to an idle instance.

Dispatch is to an idle instance, never round-robin onto a busy one: idle instances wait in a LIFO stack (the
most recently used one has the warmest caches) and callers wait in FIFO order for the next instance to free up.
"""

from __future__ import annotations

import asyncio
import collections
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from modelhost.backends.base import Arrays, ModelInstance


@dataclass(slots=True)
class Job:
    inputs: Arrays
    output_names: list[str]
    batch_size: int


class _Worker:
    def __init__(self, instance: ModelInstance) -> None:
        self.instance = instance
        # One thread per instance: an instance is never entered by two threads at once.
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"instance-{instance.name}")

    def close(self) -> None:
        self.thread.shutdown(wait=True)
        self.instance.close()


class InstancePool:
    def __init__(self, instances: list[ModelInstance]) -> None:
        self._workers = [_Worker(i) for i in instances]
        self._idle: list[_Worker] = list(reversed(self._workers))
        self._waiters: collections.deque[asyncio.Future[_Worker]] = collections.deque()

    def __len__(self) -> int:
        return len(self._workers)

    async def _acquire(self) -> _Worker:
        if self._idle:
            return self._idle.pop()
        waiter: asyncio.Future[_Worker] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release(waiter.result())  # handed over just as we were cancelled: pass it on
            else:
                self._waiters.remove(waiter)
            raise

    def _release(self, worker: _Worker) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(worker)
                return
        self._idle.append(worker)

    async def execute(self, job: Job) -> Arrays:
        worker = await self._acquire()
        try:
            future = asyncio.get_running_loop().run_in_executor(
                worker.thread, worker.instance.execute, job.inputs, job.output_names
            )
        except BaseException:
            self._release(worker)
            raise
        # The instance stays taken until the runtime returns, even if the caller goes away meanwhile.
        future.add_done_callback(lambda _f: self._release(worker))
        return await asyncio.shield(future)

    def close(self) -> None:
        for worker in self._workers:
            worker.close()
