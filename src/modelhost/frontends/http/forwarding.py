"""HTTP in a frontend process: inference requests decoded here and sent to the engine as tensors; everything
else forwarded to the engine as received.

The common inference request (JSON or binary tensors, no shared memory, no classification) costs the engine only
the model's own work: parsing, decoding and encoding happen here, on this process's core. Anything else (control
endpoints, shared-memory or classification requests, raw binary bodies, compressed bodies, and any request this
process cannot decode) goes to the engine's own HTTP routes unchanged, so that its answer, its log line and its
statistics are exactly those of the single-process server.
"""

from __future__ import annotations

import asyncio
import logging
import re
from urllib.parse import unquote

from modelhost.errors import ModelhostError
from modelhost.frontends.http.infer_codec import DecodedInfer
from modelhost.frontends.http.protocol import HttpRequest, HttpResponse, error_response
from modelhost.frontends.http.routes import (
    LARGE_BODY,
    compressed,
    decode_infer,
    encode_infer_off_loop_if_large,
    failure_response,
)
from modelhost.transport.frontend_side import EngineClient, EngineGone
from modelhost.transport.messages import HttpCall, HttpReply, InferCall, Refused, WireOutput
from modelhost.transport.tensors import from_wire, to_wire
from modelhost.types import InferenceResponse

log = logging.getLogger("modelhost.http")

# Versions of 19 digits or more go to the engine, which refuses them with Triton's message.
_INFER = re.compile(r"/v2/models/([^/]+)(?:/versions/([0-9]{1,18}))?/infer")


class ForwardingRoutes:
    def __init__(self, engine: EngineClient, buffer_limit: int) -> None:
        self.engine = engine
        # Bytes of request bodies sent to the engine and not yet answered: past the limit a request is refused
        # at once (503) instead of growing memory here and in the engine.
        self.buffer_limit = buffer_limit
        self.buffered = 0

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        size = len(request.body)
        if self.buffered + size > self.buffer_limit:
            return self._refuse(request)
        self.buffered += size
        try:
            decoded = await self._decode_here(request)
            if decoded is None:
                return await self._forward(request)
            return await self._infer(request, *decoded)
        except EngineGone:
            return error_response(503, "the engine process is gone; the server is restarting")
        finally:
            self.buffered -= size

    def _refuse(self, request: HttpRequest) -> HttpResponse:
        message = (
            f"this frontend process has {self.buffered} bytes of requests in flight; a request of "
            f"{len(request.body)} bytes would pass its limit of {self.buffer_limit} bytes "
            "(--frontend-buffer-byte-size)"
        )
        log.info("%s %s refused: %s", request.method, request.path, message)  # as every refused request
        m = _INFER.fullmatch(request.path) if request.method == "POST" else None
        if m is not None:
            self.engine.send(Refused(unquote(m.group(1)), m.group(2) or ""))
        return error_response(503, message)

    async def _decode_here(self, request: HttpRequest) -> tuple[str, str, DecodedInfer] | None:
        """The inference request decoded in this process, or None when the engine must take it as it is."""
        if request.method != "POST" or request.too_large or "content-encoding" in request.headers:
            return None
        m = _INFER.fullmatch(request.path)
        if m is None:
            return None
        name, version = unquote(m.group(1)), m.group(2) or ""
        try:
            if len(request.body) > LARGE_BODY:
                decoded = await asyncio.to_thread(self._decode, request, name, version)
            else:
                decoded = self._decode(request, name, version)
        except Exception:
            # Bad input, shared memory, raw binary bodies (and any fault of the decoder itself): the engine decodes
            # it again and answers as it always has (status, message, log line and failure count).
            return None
        if decoded.request.shared_memory or any(o.classification for o in decoded.request.outputs):
            return None  # the engine holds the regions; the labels are the model's
        return name, version, decoded

    @staticmethod
    def _decode(request: HttpRequest, name: str, version: str) -> DecodedInfer:
        return decode_infer(request.headers, request.body, name, version, None)

    async def _forward(self, request: HttpRequest) -> HttpResponse:
        call = HttpCall(
            self.engine.next_call(),
            request.method,
            request.path,
            request.query,
            request.headers,
            memoryview(request.body),
            request.too_large,
            request.received_ns,
        )
        reply = await self.engine.call(call)
        assert isinstance(reply, HttpReply)
        return HttpResponse(reply.status, bytes(reply.body), reply.content_type, reply.headers)

    async def _infer(
        self, request: HttpRequest, name: str, version: str, decoded: DecodedInfer
    ) -> HttpResponse:
        core = decoded.request
        call = InferCall(
            self.engine.next_call(),
            request.path,
            name,
            version,
            core.id,
            [to_wire(t) for t in core.inputs],
            [WireOutput(o.name, o.parameters) for o in core.outputs],
            core.parameters,
            core.priority,
            core.timeout_us,
            request.received_ns,
            request.headers.get("traceparent", ""),
        )
        reply = await self.engine.call(call)
        if isinstance(reply, HttpReply):  # the request failed: the engine's answer, logged there
            return HttpResponse(reply.status, bytes(reply.body), reply.content_type, reply.headers)
        response = InferenceResponse(
            reply.model_name,
            reply.model_version,
            reply.request_id,
            [from_wire(t, name) for t in reply.outputs],
            reply.parameters,
        )
        try:
            encoded = await encode_infer_off_loop_if_large(name, response, decoded)
        except ModelhostError as e:
            return failure_response(request.method, request.path, e)
        return compressed(request, encoded)
