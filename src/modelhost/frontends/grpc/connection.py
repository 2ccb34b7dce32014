"""One HTTP/2 connection of the gRPC server: the asyncio protocol, its limits and timeouts, and its shutdown.

Chosen by measurement over grpc.aio (benchmarks/README.md, "gRPC"): grpc.aio's per-call machinery cost more
than everything else in a request, while this runs each call as one task on the server's own event loop.

The connection is built in layers, each a module of its own: `http2.py` parses frames into HTTP/2 state
(`http2_streams.py`, which also writes them); `answers.py` writes a call's answer within the flow-control windows
and the transport's backpressure; `dispatch.py` turns streams into calls and runs them; `keepalive.py` holds the
ping policy and the connection's age; this module adds the transport's events and the idle and request timeouts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import cast

import grpc

from modelhost.frontends.grpc.calls import AbortError
from modelhost.frontends.grpc.dispatch import (
    INITIAL_WINDOW,
    MAX_CONCURRENT_STREAMS,
    MAX_FRAME_SIZE,
    MAX_HEADER_LIST_SIZE,
    CallDispatch,
)
from modelhost.frontends.grpc.http2 import Http2Server
from modelhost.frontends.grpc.http2_frames import ProtocolError
from modelhost.frontends.grpc.keepalive import Keepalive
from modelhost.frontends.grpc.methods import Method
from modelhost.observability.logs import RateLimitedLog
from modelhost.options.limits import GrpcLimits

log = logging.getLogger("modelhost.grpc")


_refusals = RateLimitedLog()


class GrpcConnection(CallDispatch):
    """One client's connection, as the asyncio protocol of its transport: the layers below it joined in one
    object, so that a call's way from the bytes to its handler and back is direct method calls."""

    __slots__ = ("connections", "limits", "timer")

    def __init__(
        self, methods: dict[bytes, Method], limits: GrpcLimits, connections: set[GrpcConnection]
    ) -> None:
        loop = asyncio.get_running_loop()
        http2 = Http2Server(
            self,
            max_concurrent_streams=MAX_CONCURRENT_STREAMS,
            initial_window=INITIAL_WINDOW,
            max_frame_size=MAX_FRAME_SIZE,
            max_header_list_size=MAX_HEADER_LIST_SIZE,
        )
        super().__init__(
            http2,
            Keepalive(self, limits, loop),
            loop,
            methods,
            limits.max_message_size,
            limits.max_decompressed_size,
        )
        self.limits = limits
        self.connections = connections
        # The timeouts: one timer, moved on lazily (when it fires it checks these times and sets itself again if
        # the deadline moved), so that receiving bytes only reads the clock.
        self.timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol --------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        if len(self.connections) >= self.limits.max_connections:
            _refusals.note(
                log, f"{self.limits.max_connections} gRPC connections are open (--grpc-max-connections)"
            )
            self.closed = True
            self.transport.close()
            return
        self.connections.add(self)
        self.http2.initiate()
        self.flush()
        self._arm(min(self.limits.idle_timeout, self.limits.request_timeout))
        self.keepalive.start()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.connections.discard(self)
        self.can_write.set()
        self._drop_calls("the connection was lost")
        self._wake_window_waiters()
        self.idle.set()
        if self.timer is not None:
            self.timer.cancel()
        self.keepalive.stop()

    def data_received(self, data: bytes) -> None:
        try:
            self.http2.receive(data)  # calls the on_* methods of the layers below, frame by frame
        except ProtocolError as e:
            # A GOAWAY saying why is queued; send it and close.
            log.info("closing a gRPC connection: %s (%s)", e, e.code.name)
            self.flush()
            self.close()
            return
        self.flush()

    # -- pings (keepalive.py) -----------------------------------------------------------------------------------

    def on_ping(self) -> None:
        self.keepalive.on_ping()

    def on_ping_ack(self, payload: bytes) -> None:
        self.keepalive.on_ping_ack(payload)

    # -- timeouts ----------------------------------------------------------------------------------------------

    def _arm(self, delay: float) -> None:
        self.timer = self.loop.call_later(max(delay, 0.001), self._on_timer)

    def _on_timer(self) -> None:
        self.timer = None
        if self.closed or self.transport is None or self.transport.is_closing():
            return
        limits = self.limits
        now = time.monotonic()
        silent = now - self.last_active
        if not self.calls:
            limit = limits.idle_timeout if self.any_call else min(limits.idle_timeout, limits.request_timeout)
            if silent >= limit:
                log.info("closing a gRPC connection idle for %g s", limit)
                self.go_away()
                self.close()
            else:
                self._arm(limit - silent)
            return
        if silent >= limits.request_timeout:
            # Unary calls whose request stopped halfway; a streaming call may wait for its client as long as it
            # likes, and a call being answered has no timeout.
            for call in list(self.calls.values()):
                if call.task is None and call.inbox is None:
                    log.info("gRPC call to %s: no byte of its request for %g s", call.method.name, silent)
                    self._fail_early(
                        call,
                        AbortError(
                            grpc.StatusCode.DEADLINE_EXCEEDED,
                            f"no byte of the request for {limits.request_timeout:g} s",
                        ),
                    )
            self.flush()
            self._arm(limits.request_timeout)
        else:
            self._arm(limits.request_timeout - silent)

    # -- shutdown ----------------------------------------------------------------------------------------------

    async def drain(self, timeout: float) -> bool:
        """GOAWAY, then wait up to `timeout` s for the calls in flight; True when they all finished."""
        self.go_away()
        try:
            await asyncio.wait_for(self.idle.wait(), timeout)
            return True
        except TimeoutError:
            return False
