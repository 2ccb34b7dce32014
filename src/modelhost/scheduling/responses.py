"""Where the responses of a decoupled model's request go: 0..N of them, then the end of the request.

The backend puts each response (outputs, or an error) as it comes; the frontend takes them in order until the
final one. A frontend whose client went away cancels the request, and the backend hears of it (a python model's
`is_cancelled()` turns true).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy.typing as npt

Arrays = dict[str, npt.NDArray[Any]]


@dataclass(slots=True)
class StreamItem:
    outputs: Arrays | None  # None: no response, only the end of the request
    error: BaseException | None
    final: bool


class ResponseSink:
    def __init__(self) -> None:
        self._queue: asyncio.Queue[StreamItem] = asyncio.Queue()
        self.finished = False
        self.on_cancel: Callable[[], None] | None = None

    def put(self, outputs: Arrays | None, error: BaseException | None = None, final: bool = False) -> None:
        if self.finished:
            return  # nothing may follow the final response
        self.finished = final
        self._queue.put_nowait(StreamItem(outputs, error, final))

    async def get(self) -> StreamItem:
        return await self._queue.get()

    def cancel(self) -> None:
        if not self.finished and self.on_cancel is not None:
            self.on_cancel()
