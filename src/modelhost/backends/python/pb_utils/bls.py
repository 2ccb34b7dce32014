"""What a BLS request has of its own: where it would like its outputs (PreferredMemory), and the responses of a
decoupled one (ResponseIterator), as a runtime's answer is handed to the model."""

from __future__ import annotations

import enum
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any

from modelhost.backends.python.pb_utils.responses import InferenceResponse


class MemoryType(enum.IntEnum):
    """PreferredMemory's memory types, with the values of Triton's `PreferredMemory::MemoryType` (not core's)."""

    TRITONSERVER_MEMORY_GPU = 0
    TRITONSERVER_MEMORY_CPU = 1


TRITONSERVER_MEMORY_GPU = MemoryType.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = MemoryType.TRITONSERVER_MEMORY_CPU
MEMORY_DEFAULT = 2  # PreferredMemory::DEFAULT: not exposed by Triton, the BLS constructor's default


class PreferredMemory:
    """Where a BLS request would like its outputs: PreferredMemory(TRITONSERVER_MEMORY_GPU, 0) gives them on
    cuda:0 (copied there in the stub), TRITONSERVER_MEMORY_CPU or the default in host memory."""

    def __init__(self, preferred_memory_type: MemoryType | int, preferred_device_id: int = 0) -> None:
        valid = (MemoryType.TRITONSERVER_MEMORY_GPU, MemoryType.TRITONSERVER_MEMORY_CPU, MEMORY_DEFAULT)
        if (
            isinstance(preferred_memory_type, bool)
            or not isinstance(preferred_memory_type, int)
            or (preferred_memory_type not in valid)
        ):
            raise TypeError(
                "PreferredMemory(): preferred_memory_type must be TRITONSERVER_MEMORY_GPU or TRITONSERVER_MEMORY_CPU"
            )
        if isinstance(preferred_device_id, bool) or not isinstance(preferred_device_id, int):
            raise TypeError("PreferredMemory(): preferred_device_id must be an int")
        self.preferred_memory_type = int(preferred_memory_type)
        self.preferred_device_id = preferred_device_id


class ResponseIterator:
    """The responses of a decoupled BLS request, as they arrive. Once the last has arrived, iterating again
    starts over from the first (as Triton's does); cancel() asks the server to cancel the request."""

    def __init__(
        self, responses: Iterable[InferenceResponse], cancel: Callable[[], None] | None = None
    ) -> None:
        self._source: Iterator[InferenceResponse] = iter(responses)
        self._cancel = cancel
        self._seen: list[InferenceResponse] = []
        self._finished = False
        self._index = 0
        self._lock = threading.Lock()

    def __iter__(self) -> ResponseIterator:
        if self._finished and self._index >= len(self._seen):
            self._index = 0
        return self

    def __next__(self) -> InferenceResponse:
        with self._lock:
            if not self._finished:
                try:
                    response = next(self._source)
                except StopIteration:
                    self._finished = True
                    self._index = len(self._seen)
                    raise StopIteration from None
                self._seen.append(response)
                return response
            if self._index < len(self._seen):
                self._index += 1
                return self._seen[self._index - 1]
            raise StopIteration

    def cancel(self) -> None:
        if self._cancel is not None:
            self._cancel()


async def bls_result(
    awaitable: Awaitable[InferenceResponse | AsyncIterator[InferenceResponse]],
) -> InferenceResponse | ResponseIterator | AsyncIterator[InferenceResponse]:
    result: Any = await awaitable
    if isinstance(result, InferenceResponse | ResponseIterator) or hasattr(result, "__anext__"):
        return result  # type: ignore[no-any-return]
    return ResponseIterator(result, getattr(result, "cancel", None))
