"""A gRPC connection's keepalive and ping policy, and its maximum age: tritonserver's flags with gRPC's defaults
(`GrpcLimits`, docs/grpc.md).

- our pings: a connection silent for `keepalive_time` (only while it has calls, unless
  `keepalive_permit_without_calls`) is pinged, at most `max_pings_without_data` times between answers (0: no
  limit), and closed when a ping is not acknowledged within `keepalive_timeout`.
- the client's pings: closer together than `min_recv_ping_interval` (2 hours while it has no call, unless
  permitted), with no answer of ours in between, they are strikes; past `max_ping_strikes` (0: any number) the
  client is sent GOAWAY ENHANCE_YOUR_CALM "too_many_pings", as gRPC's servers do.
- age: GOAWAY once a connection is `max_connection_age` old, then closed after `max_connection_age_grace`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from typing import Protocol

from modelhost.frontends.grpc.http2_frames import ErrorCode
from modelhost.options.limits import GrpcLimits

log = logging.getLogger("modelhost.grpc")

# How often a client without calls may ping, unless permitted (gRPC's rule for idle connections).
IDLE_PING_INTERVAL_S = 7200.0


class PingSender(Protocol):
    def send_ping(self, payload: bytes) -> None: ...


class Connection(Protocol):
    """What the policy reads of its connection, and what it asks of it."""

    @property
    def closed(self) -> bool: ...

    @property
    def going_away(self) -> bool: ...

    @property
    def last_active(self) -> float:
        """The clock when the connection last started a call, received request bytes or ended a call."""

    @property
    def calls(self) -> Mapping[int, object]: ...

    @property
    def http2(self) -> PingSender: ...

    def flush(self) -> None: ...

    def go_away(self, code: ErrorCode = ErrorCode.NO_ERROR, debug: bytes = b"") -> None: ...

    def close(self) -> None: ...


class Keepalive:
    """The pings of one connection, both ways, and its age."""

    __slots__ = (
        "age_timers",
        "connection",
        "last_ping_received",
        "limits",
        "loop",
        "ping_deadline",
        "ping_sent",
        "ping_strikes",
        "pings_without_data",
        "timer",
    )

    def __init__(self, connection: Connection, limits: GrpcLimits, loop: asyncio.AbstractEventLoop) -> None:
        self.connection = connection
        self.limits = limits
        self.loop = loop
        self.timer: asyncio.TimerHandle | None = None
        # Our ping in flight (its payload) and its deadline, pings sent since our last answer; and the client's
        # pings: when the last came, and the strikes against it.
        self.ping_sent: bytes | None = None
        self.ping_deadline: asyncio.TimerHandle | None = None
        self.pings_without_data = 0
        self.last_ping_received = float("-inf")
        self.ping_strikes = 0
        self.age_timers: list[asyncio.TimerHandle] = []

    def start(self) -> None:
        """The connection is made: its keepalive and age timers run from now."""
        limits = self.limits
        self.timer = self.loop.call_later(limits.keepalive_time / 1000, self._keepalive)
        if limits.max_connection_age is not None:
            self.age_timers.append(self.loop.call_later(limits.max_connection_age / 1000, self._aged))

    def stop(self) -> None:
        """The connection is lost: no timer of the policy fires any more."""
        for handle in (self.timer, self.ping_deadline, *self.age_timers):
            if handle is not None:
                handle.cancel()

    def answered(self) -> None:
        """We sent headers or data: the ping counts start again, as gRPC's do."""
        self.ping_strikes = 0
        self.last_ping_received = float("-inf")
        self.pings_without_data = 0

    def _keepalive(self) -> None:
        limits = self.limits
        connection = self.connection
        self.timer = None
        if connection.closed or connection.going_away:
            return
        silent_ms = (time.monotonic() - connection.last_active) * 1000
        if (
            silent_ms >= limits.keepalive_time
            and self.ping_sent is None
            and (connection.calls or limits.keepalive_permit_without_calls)
            and (
                limits.max_pings_without_data == 0 or self.pings_without_data < limits.max_pings_without_data
            )
        ):
            self.ping_sent = os.urandom(8)
            self.pings_without_data += 1
            connection.http2.send_ping(self.ping_sent)
            connection.flush()
            self.ping_deadline = self.loop.call_later(limits.keepalive_timeout / 1000, self._ping_unanswered)
            wait_ms = float(limits.keepalive_time)
        else:
            wait_ms = max(limits.keepalive_time - silent_ms, 1.0)
        self.timer = self.loop.call_later(wait_ms / 1000, self._keepalive)

    def _ping_unanswered(self) -> None:
        self.ping_deadline = None
        if self.ping_sent is not None and not self.connection.closed:
            log.info(
                "closing a gRPC connection: no answer to a keepalive ping in %d ms (--grpc-keepalive-timeout)",
                self.limits.keepalive_timeout,
            )
            self.connection.close()

    def on_ping_ack(self, payload: bytes) -> None:
        if payload == self.ping_sent:
            self.ping_sent = None
            if self.ping_deadline is not None:
                self.ping_deadline.cancel()
                self.ping_deadline = None

    def on_ping(self) -> None:
        """gRPC's ping abuse policy: pings closer together than allowed, with no answer of ours in between, are
        strikes (the ping is acknowledged already)."""
        limits = self.limits
        now = time.monotonic()
        idle = not self.connection.calls and not limits.keepalive_permit_without_calls
        interval_s = IDLE_PING_INTERVAL_S if idle else limits.min_recv_ping_interval / 1000
        too_soon = now < self.last_ping_received + interval_s
        self.last_ping_received = now
        if not too_soon:
            return
        self.ping_strikes += 1
        if limits.max_ping_strikes and self.ping_strikes > limits.max_ping_strikes:
            log.warning(
                "closing a gRPC connection: too many pings (%d too soon; --grpc-http2-max-ping-strikes)",
                self.ping_strikes,
            )
            self.connection.go_away(ErrorCode.ENHANCE_YOUR_CALM, b"too_many_pings")
            self.connection.close()

    def _aged(self) -> None:
        connection = self.connection
        if connection.closed:
            return
        log.info("a gRPC connection reached its maximum age (--grpc-max-connection-age): GOAWAY")
        connection.go_away()
        grace = self.limits.max_connection_age_grace
        if not connection.calls:
            connection.close()
        elif grace is not None:
            self.age_timers.append(self.loop.call_later(grace / 1000, connection.close))
