"""--frontend-buffer-byte-size: the request bodies one frontend process holds while the engine works on them.

Past the limit a request is refused at once (503) instead of growing memory here and in the engine; a refused
inference request is counted by the engine as a rejection of its model, as Triton counts a request its queue
refuses.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from modelhost.engine_api import EngineAPI
from modelhost.errors import Rejected
from modelhost.frontends.http.messages import Handler, HttpRequest, HttpResponse
from modelhost.frontends.http.statuses import failure_response

_INFER = re.compile(r"/v2/models/([^/]+)(?:/versions/([0-9]{1,18}))?/infer")


class BufferLimit:
    """HTTP routes behind a bound on the bytes of request bodies in flight."""

    def __init__(self, routes: Handler, engine: EngineAPI, limit: int) -> None:
        self.routes = routes
        self.engine = engine
        self.limit = limit
        self.buffered = 0

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        size = len(request.body)
        if self.buffered + size > self.limit:
            return self._refuse(request)
        self.buffered += size
        try:
            return await self.routes(request)
        finally:
            self.buffered -= size

    def _refuse(self, request: HttpRequest) -> HttpResponse:
        message = (
            f"this frontend process has {self.buffered} bytes of requests in flight; a request of "
            f"{len(request.body)} bytes would pass its limit of {self.limit} bytes "
            "(--frontend-buffer-byte-size)"
        )
        m = _INFER.fullmatch(request.path) if request.method == "POST" else None
        if m is not None:
            self.engine.refused(unquote(m.group(1)), m.group(2) or "")
        # Answered as any refused request (503 with Retry-After, logged once).
        return failure_response(request.method, request.path, Rejected(message))
