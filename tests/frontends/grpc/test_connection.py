"""The gRPC HTTP/2 connection (`connection.py`), driven in memory by an h2 client: protocol errors closing it, its
drain, a lost transport, the connection limit, and its idle and request timeouts."""

from __future__ import annotations

import asyncio
import urllib.parse

import h2.errors
from hyperframe.frame import GoAwayFrame

from frontends.grpc.peer import (
    DEADLINE_EXCEEDED,
    OK,
    Handlers,
    MemoryTransport,
    Peer,
    framed,
    frames,
    run,
    run_with,
    still_serving,
)
from modelhost.frontends.grpc.connection import GrpcConnection
from modelhost.options.limits import GrpcLimits


def test_too_many_open_streams_close_the_connection() -> None:
    async def body() -> None:
        handlers = Handlers()
        peer = Peer(handlers.methods(), handshake=False)  # the client never learns the server's limit
        for _ in range(1100):
            peer.start(b"/t.S/Slow")
            if peer.transport.closed:
                break
        await peer.settle()
        assert peer.transport.closed and peer.goaway is not None
        assert peer.goaway.error_code == h2.errors.ErrorCodes.PROTOCOL_ERROR

    asyncio.run(body())


def test_an_oversized_header_block_closes_the_connection() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        peer.start(b"/t.S/Echo", [(b"x-big", b"v" * 40_000)])
        await peer.settle()
        assert peer.transport.closed and peer.goaway is not None

    run(test)


def test_malformed_frames_close_the_connection() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        # A DATA frame on stream 0 (a connection error), then bytes that are not frames at all.
        peer.server.data_received(b"\x00\x00\x04\x00\x00\x00\x00\x00\x00abcd" + b"\xff" * 64)
        await peer.settle()
        assert peer.transport.closed
        assert peer.goaway is not None and peer.goaway.error_code == h2.errors.ErrorCodes.PROTOCOL_ERROR

    run(test)


def test_go_away_lets_calls_in_flight_finish_and_refuses_new_ones() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        slow = peer.call(b"/t.S/Slow", framed(b""))
        await peer.settle()
        drained = asyncio.create_task(peer.server.drain(5.0))
        await asyncio.sleep(0)
        # h2 as a client takes no frame after a GOAWAY, so it is read here and kept from the client.
        (goaway,) = frames(peer.transport.written)
        peer.transport.written.clear()
        assert isinstance(goaway, GoAwayFrame) and goaway.last_stream_id == slow
        late = peer.call(b"/t.S/Echo", framed(b""))  # sent before the client saw the GOAWAY
        assert (await peer.answer(late)).reset == h2.errors.ErrorCodes.REFUSED_STREAM
        handlers.release.set()
        assert (await peer.answer(slow)).messages() == [b"done"]
        assert await drained

    run(test)


def test_connection_lost_cancels_calls() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        peer.call(b"/t.S/Slow", framed(b""))
        await peer.settle()
        peer.server.connection_lost(None)
        await peer.settle()
        assert handlers.cancelled == 1 and not peer.server.calls

    run(test)


def test_a_connection_past_the_limit_is_closed_at_once() -> None:
    async def body() -> None:
        handlers = Handlers()
        peer = Peer(handlers.methods(), max_connections=1)
        transport = MemoryTransport()
        extra = GrpcConnection(handlers.methods(), GrpcLimits(max_connections=1), peer.server.connections)
        transport.protocol = extra
        extra.connection_made(transport)  # type: ignore[arg-type]
        assert transport.closed and extra not in peer.server.connections
        await still_serving(peer)  # the first one goes on

    asyncio.run(body())


# -- timeouts -------------------------------------------------------------------------------------------------------


def test_a_connection_without_calls_is_sent_goaway_and_closed_after_the_idle_timeout() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        await still_serving(peer)
        await asyncio.sleep(0.3)
        peer.receive()
        assert peer.goaway is not None and peer.goaway.error_code == h2.errors.ErrorCodes.NO_ERROR
        assert peer.transport.closed

    run_with(test, idle_timeout=0.05, request_timeout=60)


def test_a_connection_that_starts_no_call_is_closed_after_the_request_timeout() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        await asyncio.sleep(0.3)
        assert peer.transport.closed

    run_with(test, idle_timeout=60, request_timeout=0.05)


def test_frames_without_a_call_do_not_keep_a_connection_open() -> None:
    """A client that sends only SETTINGS and PRIORITY now and then (no call) is closed at the request timeout."""

    async def test(handlers: Handlers, peer: Peer) -> None:
        for _ in range(30):
            if peer.transport.closed:
                break
            peer.server.data_received(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")  # SETTINGS
            peer.server.data_received(b"\x00\x00\x05\x02\x00\x00\x00\x00\x07" + bytes(5))  # PRIORITY
            await asyncio.sleep(0.02)
        assert peer.transport.closed

    run_with(test, idle_timeout=60, request_timeout=0.1)


def test_a_unary_request_that_stops_halfway_is_deadline_exceeded_and_the_connection_goes_on() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        stream_id = peer.start(b"/t.S/Echo")
        peer.h2.send_data(stream_id, framed(b"x" * 1000)[:500])  # half a message, then nothing
        peer.send()
        await asyncio.sleep(0.3)
        answer = await peer.answer(stream_id)
        assert answer.status() == DEADLINE_EXCEEDED
        assert urllib.parse.unquote(answer.message()) == "no byte of the request for 0.05 s"
        assert not peer.transport.closed
        await still_serving(peer)

    run_with(test, idle_timeout=60, request_timeout=0.05)


def test_a_streaming_call_may_wait_for_its_client_and_keeps_its_connection_open() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        stream_id = peer.start(b"/t.S/Chat")
        peer.h2.send_data(stream_id, framed(b"a"))
        peer.send()
        await asyncio.sleep(0.3)  # six of each timeout
        peer.h2.send_data(stream_id, framed(b"b"), end_stream=True)
        peer.send()
        answer = await peer.answer(stream_id)
        assert answer.status() == OK and answer.messages() == [b"A", b"B"]

    run_with(test, idle_timeout=0.05, request_timeout=0.05)
