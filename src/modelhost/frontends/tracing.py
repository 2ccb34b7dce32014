"""The frontends' part of a trace: once the engine has answered a traced request, the frontend encodes and sends
the answer, and tells the engine how long that took (`EngineAPI.sent`), which records it as the trace's send span
(Triton's HTTP_SEND_START/END, GRPC_SEND_START/END). One helper for every frontend, HTTP and gRPC alike:

    response = await engine.infer(request, context)
    if request.trace is None:  # most requests: nothing to record
        return encode(response)
    with sending(engine, request):
        return encode(response)

For an untraced request the helper is a shared context manager that does nothing; a hot path checks
`request.trace` first, as above, which costs less than entering even that.
"""

from __future__ import annotations

import contextlib
import time
from contextlib import AbstractContextManager
from types import TracebackType

from modelhost.engine_api import EngineAPI
from modelhost.types import InferenceRequest

_UNTRACED = contextlib.nullcontext()


class _Sending:
    """The send span of a traced request: from entering until leaving, whether the encoding succeeded or not."""

    __slots__ = ("engine", "last", "request", "started")

    def __init__(self, engine: EngineAPI, request: InferenceRequest, last: bool) -> None:
        self.engine = engine
        self.request = request
        self.last = last
        self.started = 0

    def __enter__(self) -> None:
        self.started = time.monotonic_ns()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.engine.sent(self.request, self.started, last=self.last)


def sending(engine: EngineAPI, request: InferenceRequest, *, last: bool = True) -> AbstractContextManager[None]:
    """What to encode and send `request`'s answer within. `last`: the answer ends the request's trace (a unary
    call's; each answer of a stream is sent with last=False, the stream's end ends its trace)."""
    if request.trace is None:
        return _UNTRACED
    return _Sending(engine, request, last)


__all__ = ["sending"]
