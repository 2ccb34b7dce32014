"""The ping policy and connection age (`keepalive.py`): through a connection driven in memory by an h2 client, and
alone against a stand-in connection."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import h2.errors
from hyperframe.frame import GoAwayFrame, PingFrame

from frontends.grpc.peer import Handlers, Peer, frame_types, framed, run_with, still_serving
from modelhost.frontends.grpc.http2_frames import ErrorCode
from modelhost.frontends.grpc.keepalive import Keepalive
from modelhost.options.limits import GrpcLimits


def test_an_unanswered_keepalive_ping_closes_the_connection() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        await asyncio.sleep(0.3)  # the server pinged; this client never reads, so never acknowledges
        assert peer.transport.closed

    run_with(test, keepalive_time=50, keepalive_timeout=50, keepalive_permit_without_calls=True)


def test_an_answered_keepalive_ping_keeps_the_connection() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        await asyncio.sleep(0.1)  # past the keepalive time: the server has pinged
        assert peer.server.keepalive.ping_sent is not None
        assert PingFrame.type in frame_types(bytes(peer.transport.written))
        peer.receive()  # a client that reads acknowledges the ping
        await peer.settle()
        assert peer.server.keepalive.ping_sent is None and peer.server.keepalive.ping_deadline is None
        assert not peer.transport.closed
        await still_serving(peer)

    # The timeout is long so that only the acknowledgement, not the machine's speed, decides the outcome.
    run_with(test, keepalive_time=20, keepalive_timeout=60_000, keepalive_permit_without_calls=True)


def test_without_calls_the_server_does_not_ping_unless_permitted() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        await asyncio.sleep(0.3)
        assert not peer.transport.closed  # no ping was sent, so none went unanswered

    run_with(test, keepalive_time=20, keepalive_timeout=20)


def test_a_client_that_pings_too_often_is_told_too_many_pings() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        for i in range(4):  # no call and no permission: any second ping within 2 hours is a strike
            peer.h2.ping(bytes([i]) * 8)
            peer.send()
        peer.receive()
        assert peer.goaway is not None
        assert peer.goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        assert peer.goaway.additional_data == b"too_many_pings"
        assert peer.transport.closed

    run_with(test, max_ping_strikes=2)


def test_pings_between_answers_are_no_strikes() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        for i in range(6):
            peer.h2.ping(bytes([i]) * 8)
            peer.send()
            await still_serving(peer)  # an answer between pings starts the count again
        assert peer.goaway is None and not peer.transport.closed

    run_with(test, max_ping_strikes=1)


def test_a_connection_past_its_age_is_sent_goaway_and_its_call_finishes_within_the_grace() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        peer.call(b"/t.S/Slow", framed(b""))
        await asyncio.sleep(0.2)  # past the age: GOAWAY (h2's client takes no frame after it, so the server's
        assert peer.server.going_away  # state is what is looked at), and the call in flight goes on
        assert GoAwayFrame.type in frame_types(bytes(peer.transport.written))
        assert not peer.transport.closed
        handlers.release.set()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if not peer.server.calls:
                break
        assert not peer.server.calls and handlers.cancelled == 0  # answered, not cut off
        await asyncio.sleep(0.05)
        assert peer.transport.closed  # and then closed, having nothing left to do

    run_with(test, max_connection_age=50, max_connection_age_grace=10_000)


def test_past_the_grace_a_connection_is_closed_with_its_calls() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        peer.call(b"/t.S/Slow", framed(b""))
        await asyncio.sleep(0.4)
        assert peer.transport.closed
        assert handlers.cancelled == 1

    run_with(test, max_connection_age=50, max_connection_age_grace=50)


# -- the policy alone ---------------------------------------------------------------------------------------------


class StandIn:
    """What the policy reads of a connection, and a record of what it asked of it."""

    def __init__(self, calls: int = 0) -> None:
        self.closed = False
        self.going_away = False
        self.last_active = time.monotonic() - 3600.0  # silent for an hour
        self.calls: dict[int, object] = {2 * i + 1: object() for i in range(calls)}
        self.http2 = self
        self.pings: list[bytes] = []
        self.flushes = 0
        self.goaways: list[tuple[ErrorCode, bytes]] = []

    def send_ping(self, payload: bytes) -> None:
        self.pings.append(payload)

    def flush(self) -> None:
        self.flushes += 1

    def go_away(self, code: ErrorCode = ErrorCode.NO_ERROR, debug: bytes = b"") -> None:
        self.going_away = True
        self.goaways.append((code, debug))

    def close(self) -> None:
        self.closed = True


def policy_of(connection: StandIn, **limits: Any) -> Keepalive:
    return Keepalive(connection, GrpcLimits(**limits), asyncio.get_running_loop())


def keepalive_fires(policy: Keepalive) -> None:
    """The keepalive timer's turn, without waiting for it."""
    assert policy.timer is not None
    policy.timer.cancel()
    policy._keepalive()


def test_a_silent_connection_is_pinged_once_at_a_time_and_at_most_max_pings_without_data_times() -> None:
    async def body() -> None:
        connection = StandIn(calls=1)
        policy = policy_of(connection, keepalive_time=1000, max_pings_without_data=2)
        policy.start()
        keepalive_fires(policy)
        assert connection.pings == [policy.ping_sent] and connection.flushes == 1
        assert policy.ping_deadline is not None
        keepalive_fires(policy)  # its ping still in flight: no second one
        assert len(connection.pings) == 1
        policy.on_ping_ack(b"not ours")
        assert policy.ping_sent is not None
        policy.on_ping_ack(connection.pings[0])
        assert policy.ping_sent is None and policy.ping_deadline is None
        keepalive_fires(policy)
        policy.on_ping_ack(connection.pings[1])
        keepalive_fires(policy)  # two pings since our last answer: no third
        assert len(connection.pings) == 2
        policy.answered()
        keepalive_fires(policy)
        assert len(connection.pings) == 3
        policy.stop()
        assert not connection.closed

    asyncio.run(body())


def test_a_ping_unanswered_in_time_closes_the_connection() -> None:
    async def body() -> None:
        connection = StandIn(calls=1)
        policy = policy_of(connection, keepalive_time=1000)
        policy.start()
        keepalive_fires(policy)
        policy.on_ping_ack(connection.pings[0])
        policy._ping_unanswered()  # acknowledged meanwhile: nothing to do
        assert not connection.closed
        policy.answered()
        keepalive_fires(policy)
        policy._ping_unanswered()
        assert connection.closed
        policy.stop()

    asyncio.run(body())


def test_a_connection_without_calls_is_pinged_only_when_permitted() -> None:
    async def body() -> None:
        for permitted in (False, True):
            connection = StandIn(calls=0)
            policy = policy_of(connection, keepalive_time=1000, keepalive_permit_without_calls=permitted)
            policy.start()
            keepalive_fires(policy)
            assert len(connection.pings) == permitted
            policy.stop()

    asyncio.run(body())


def test_the_clients_pings_too_close_together_are_strikes_until_an_answer() -> None:
    async def body() -> None:
        connection = StandIn(calls=1)
        policy = policy_of(connection, min_recv_ping_interval=300_000, max_ping_strikes=2)
        for _ in range(3):  # the first is no strike, the next two are
            policy.on_ping()
        assert policy.ping_strikes == 2 and not connection.goaways
        policy.answered()
        for _ in range(3):
            policy.on_ping()
        assert policy.ping_strikes == 2 and not connection.goaways
        policy.on_ping()
        assert connection.goaways == [(ErrorCode.ENHANCE_YOUR_CALM, b"too_many_pings")]
        assert connection.closed

    asyncio.run(body())


def test_at_its_age_a_connection_is_sent_goaway_and_closed_now_or_after_the_grace() -> None:
    async def body() -> None:
        idle = StandIn(calls=0)
        policy_of(idle, max_connection_age=1000)._aged()
        assert idle.goaways == [(ErrorCode.NO_ERROR, b"")] and idle.closed
        for grace in (None, 60_000):
            busy = StandIn(calls=1)
            policy = policy_of(busy, max_connection_age=1000, max_connection_age_grace=grace)
            policy._aged()
            assert busy.going_away and not busy.closed  # its call goes on
            assert len(policy.age_timers) == (grace is not None)  # closed after the grace, if any
            policy.stop()

    asyncio.run(body())
