"""Triton's response cache (`--cache-config local,size=<bytes>` and `response_cache { enable: true }` in a model's
config): a successful response is kept, and a later request with the same inputs is answered from it without
running the model.

- The key is a 128-bit BLAKE2b hash of the model's name and version, every input (name, datatype, shape and
  bytes) and the requested outputs (names and classification counts), so that two requests share an answer only
  when it would be the same answer.
- One cache for the whole server, a byte budget, least recently used entries evicted first; an answer larger than
  the whole budget is not kept. The outputs are copied in (the response's arrays may view a request buffer or a
  shared-memory region) and served read-only.
- Only successful responses of models without a sequence batcher or a decoupled transaction policy (refused at
  load, with Triton's messages); the cache lives on the event loop thread only.
"""

from __future__ import annotations

import collections
import hashlib
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelhost.engine.cache_counters import CacheCounters
from modelhost.options.cache import CacheSettings
from modelhost.types import InferenceRequest, InferenceResponse, Tensor


def _tensor_bytes(array: np.ndarray[Any, Any]) -> bytes:
    if array.dtype == np.object_:  # BYTES: each element with its length, so that boundaries count
        return b"".join(len(v).to_bytes(4, "little") + bytes(v) for v in array.reshape(-1))
    return np.ascontiguousarray(array).tobytes()


def cache_key(model_name: str, version: str, request: InferenceRequest) -> bytes:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{model_name}\0{version}\0".encode())
    for tensor in sorted(request.inputs, key=lambda t: t.name):
        digest.update(f"{tensor.name}\0{tensor.datatype}\0{tensor.shape}\0".encode())
        digest.update(_tensor_bytes(tensor.data))
    for output in request.outputs:
        digest.update(f"\1{output.name}\0{output.classification}".encode())
    return digest.digest()


@dataclass(slots=True)
class _Entry:
    outputs: list[Tensor]
    nbytes: int


def _nbytes(outputs: list[Tensor]) -> int:
    total = 256
    for tensor in outputs:
        data = tensor.data
        total += 64 + (sum(len(v) for v in data.reshape(-1)) if data.dtype == np.object_ else data.nbytes)
    return total


class ResponseCache:
    __slots__ = ("_entries", "counters", "evictions", "size", "used")

    def __init__(self, settings: CacheSettings) -> None:
        self.size = settings.size
        self.used = 0
        self._entries: collections.OrderedDict[bytes, _Entry] = collections.OrderedDict()
        self.evictions = 0
        # The server-wide counters of Triton's cache metrics (nv_cache_*).
        self.counters = CacheCounters()

    def __len__(self) -> int:
        return len(self._entries)

    async def lookup(self, key: bytes, request: InferenceRequest, version: str) -> InferenceResponse | None:
        """A coroutine, as the redis cache's (it returns at once)."""
        started = time.perf_counter_ns()
        entry = self._entries.get(key)
        if entry is None:
            self.counters.looked_up(started, hit=False)
            return None
        self._entries.move_to_end(key)
        self.counters.looked_up(started, hit=True)
        return InferenceResponse(request.model_name, version, request.id, list(entry.outputs))

    def insert(self, key: bytes, response: InferenceResponse) -> None:
        started = time.perf_counter_ns()
        outputs = []
        for tensor in response.outputs:
            data = np.array(tensor.data, copy=True)
            data.flags.writeable = False
            outputs.append(Tensor(tensor.name, tensor.datatype, list(tensor.shape), data))
        nbytes = _nbytes(outputs)
        if nbytes <= self.size and key not in self._entries:
            while self.used + nbytes > self.size and self._entries:
                _, evicted = self._entries.popitem(last=False)
                self.used -= evicted.nbytes
                self.evictions += 1
            self._entries[key] = _Entry(outputs, nbytes)
            self.used += nbytes
        self.counters.inserted(started)

    @property
    def utilization(self) -> float:
        return self.used / self.size if self.size else 0.0

    def render(self) -> list[str]:
        """Triton's local cache families for /metrics."""
        return self.counters.render(self.utilization, len(self._entries), self.evictions)


__all__ = ["ResponseCache", "cache_key"]
