"""A connection's calls (`dispatch.py`), driven in memory by an h2 client: each stream a call, checked from its
headers, fed its request, run, and ended with its status; streaming calls, resets, deadlines, bad input."""

from __future__ import annotations

import asyncio
import gzip
import urllib.parse
import zlib
from typing import Any

import h2.errors
import pytest
from hyperframe.frame import GoAwayFrame

from frontends.grpc.peer import (
    DEADLINE_EXCEEDED,
    INTERNAL,
    INVALID_ARGUMENT,
    NOT_FOUND,
    OK,
    RESOURCE_EXHAUSTED,
    UNIMPLEMENTED,
    UNKNOWN,
    Handlers,
    Peer,
    framed,
    request_headers,
    run,
    still_serving,
)
from modelhost.frontends.grpc.dispatch import MAX_RESETS_PER_SECOND
from modelhost.frontends.grpc.methods import Method


def test_unary_call() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        answer = await peer.answer(peer.call(b"/t.S/Echo", framed(b"hello")))
        assert dict(answer.headers)[b":status"] == b"200"
        assert dict(answer.headers)[b"content-type"] == b"application/grpc"
        assert answer.messages() == [b"hello"]
        assert answer.trailers == [(b"grpc-status", b"0")]

    run(test)


def test_many_calls_on_one_connection_run_concurrently() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        slow = [peer.call(b"/t.S/Slow", framed(b"")) for _ in range(20)]
        await still_serving(peer)  # answered while the 20 slow calls wait
        handlers.release.set()
        for stream_id in slow:
            assert (await peer.answer(stream_id)).messages() == [b"done"]

    run(test)


def test_error_status_and_percent_encoded_message() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        answer = await peer.answer(peer.call(b"/t.S/Fail", framed(b"")))
        assert answer.status() == NOT_FOUND
        assert urllib.parse.unquote(answer.message()) == "no model 'é' at 100%"
        assert answer.data == b""  # trailers-only
        await still_serving(peer)

    run(test)


def test_a_handler_bug_is_unknown_and_the_connection_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        answer = await peer.answer(peer.call(b"/t.S/Bug", framed(b"")))
        assert answer.status() == UNKNOWN
        assert "a bug" in urllib.parse.unquote(answer.message())
        await still_serving(peer)

    run(test)
    assert caplog.text.count("unhandled error in gRPC call to bug") == 1


def test_unknown_method() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        answer = await peer.answer(peer.call(b"/t.S/Nope", framed(b"")))
        assert answer.status() == UNIMPLEMENTED and answer.message() == "Method not found!"
        # Answered from its headers while the client still sends: told to stop, and the stream is closed.
        answer = await peer.answer(peer.start(b"/t.S/Nope"))
        assert answer.status() == UNIMPLEMENTED and answer.reset == h2.errors.ErrorCodes.NO_ERROR
        assert not peer.server.http2.streams
        # A call whose headers end its stream is answered without a reset.
        stream_id = peer.h2.get_next_available_stream_id()
        peer.h2.send_headers(stream_id, request_headers(b"/t.S/Nope"), end_stream=True)
        peer.send()
        answer = await peer.answer(stream_id)
        assert answer.status() == UNIMPLEMENTED and answer.reset is None
        assert not peer.server.http2.streams
        await still_serving(peer)

    run(test)


def test_not_a_grpc_request() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        get = peer.start(b"/t.S/Echo", method=b"GET")
        assert dict((await peer.answer(get)).headers)[b":status"] == b"405"
        stream_id = peer.h2.get_next_available_stream_id()
        peer.h2.send_headers(
            stream_id,
            [
                (b":method", b"POST"),
                (b":scheme", b"http"),
                (b":path", b"/t.S/Echo"),
                (b":authority", b"t"),
                (b"content-type", b"application/json"),
            ],
        )
        peer.send()
        assert dict((await peer.answer(stream_id)).headers)[b":status"] == b"415"
        await still_serving(peer)

    run(test)


def test_a_declared_size_over_the_limit_is_refused_before_it_is_received() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        stream_id = peer.start(b"/t.S/Echo")
        peer.h2.send_data(stream_id, b"\x00\xff\xff\xff\xff" + b"x" * 1000)  # says 4 GiB follow
        peer.send()
        answer = await peer.answer(stream_id)
        assert answer.status() == RESOURCE_EXHAUSTED
        assert answer.message().startswith("Received message larger than max (4294967295 vs. 1048576)")
        assert answer.reset == h2.errors.ErrorCodes.NO_ERROR  # told to stop sending
        assert not peer.server.calls
        await still_serving(peer)

    run(test)


def test_compressed_requests() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        payload = b"tensor bytes " * 100
        for encoding, packed in ((b"gzip", gzip.compress(payload)), (b"deflate", zlib.compress(payload))):
            answer = await peer.answer(
                peer.call(b"/t.S/Echo", framed(packed, 1), [(b"grpc-encoding", encoding)])
            )
            assert answer.status() == OK and answer.messages() == [payload]
        # A compressed message that would expand past the limit is refused, not inflated.
        bomb = framed(gzip.compress(b"\0" * (2 << 20)), 1)
        answer = await peer.answer(peer.call(b"/t.S/Echo", bomb, [(b"grpc-encoding", b"gzip")]))
        assert answer.status() == RESOURCE_EXHAUSTED
        answer = await peer.answer(
            peer.call(b"/t.S/Echo", framed(b"not gzip", 1), [(b"grpc-encoding", b"gzip")])
        )
        assert answer.status() == INTERNAL
        answer = await peer.answer(peer.call(b"/t.S/Echo", framed(b"x", 1)))  # compressed flag, no encoding
        assert answer.status() == INTERNAL
        answer = await peer.answer(peer.call(b"/t.S/Echo", framed(b"x"), [(b"grpc-encoding", b"snappy")]))
        assert answer.status() == UNIMPLEMENTED
        await still_serving(peer)

    run(test)


def test_a_compressed_message_inflates_only_up_to_its_own_limit() -> None:
    async def body() -> None:
        handlers = Handlers()
        peer = Peer(handlers.methods(), 1 << 30, max_decompressed_size=1 << 20)
        payload = b"t" * (1 << 20)
        fits = await peer.answer(
            peer.call(b"/t.S/Echo", framed(gzip.compress(payload), 1), [(b"grpc-encoding", b"gzip")])
        )
        assert fits.status() == OK and fits.messages() == [payload]
        # 32 KiB of deflate that would become 32 MiB: refused once it passes 1 MiB, though messages of 1 GiB
        # may be sent uncompressed.
        bomb = framed(zlib.compress(b"\0" * (32 << 20), 9), 1)
        assert len(bomb) < 60_000
        answer = await peer.answer(peer.call(b"/t.S/Echo", bomb, [(b"grpc-encoding", b"deflate")]))
        assert answer.status() == RESOURCE_EXHAUSTED
        assert urllib.parse.unquote(answer.message()) == (
            "Received message larger than max (more than 1048576 bytes once decompressed; "
            "--grpc-max-decompressed-size)"
        )
        await still_serving(peer)

    asyncio.run(body())


def test_malformed_bodies() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        cut = await peer.answer(peer.call(b"/t.S/Echo", framed(b"abcdef")[:7]))
        assert cut.status() == INTERNAL
        none = await peer.answer(peer.call(b"/t.S/Echo", b""))
        assert none.status() == UNIMPLEMENTED
        two = await peer.answer(peer.call(b"/t.S/Echo", framed(b"a") + framed(b"b")))
        assert two.status() == UNIMPLEMENTED
        flag = await peer.answer(peer.call(b"/t.S/Echo", framed(b"a", 7)))
        assert flag.status() == INTERNAL
        await still_serving(peer)

    run(test)


def test_a_stream_reset_mid_message_is_forgotten() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        stream_id = peer.start(b"/t.S/Echo")
        peer.h2.send_data(stream_id, framed(b"x" * 1000)[:500])
        peer.send()
        await peer.settle()
        assert stream_id in peer.server.calls
        peer.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        peer.send()
        await peer.settle()
        assert not peer.server.calls  # its partial message went with it
        await still_serving(peer)

    run(test)


def test_a_reset_cancels_the_running_handler() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        stream_id = peer.call(b"/t.S/Slow", framed(b""))
        await peer.settle()
        peer.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        peer.send()
        await peer.settle()
        assert handlers.cancelled == 1
        await still_serving(peer)

    run(test)


def test_deadline() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        answer = await peer.answer(peer.call(b"/t.S/Slow", framed(b""), [(b"grpc-timeout", b"20m")]))
        assert answer.status() == DEADLINE_EXCEEDED and answer.message() == "Deadline Exceeded"
        assert handlers.cancelled == 1
        # A request that never finishes arriving is answered at its deadline too.
        stream_id = peer.start(b"/t.S/Echo", [(b"grpc-timeout", b"20000u")])
        answer = await peer.answer(stream_id)
        assert answer.status() == DEADLINE_EXCEEDED
        bad = await peer.answer(peer.call(b"/t.S/Echo", framed(b""), [(b"grpc-timeout", b"soon")]))
        assert bad.status() == INVALID_ARGUMENT
        await still_serving(peer)

    run(test)


def test_metadata_reaches_the_handler() -> None:
    seen: list[Any] = []

    async def test(handlers: Handlers, peer: Peer) -> None:
        async def handler(request: bytes, context: Any) -> bytes:
            seen.append(dict(context.invocation_metadata()))
            return b""

        peer.server.methods[b"/t.S/Meta"] = Method("meta", False, bytes, handler, bytes)
        extra = [(b"traceparent", b"00-abc-01"), (b"token-bin", b"AAEC"), (b"grpc-timeout", b"5S")]
        assert (await peer.answer(peer.call(b"/t.S/Meta", framed(b""), extra))).status() == OK

    run(test)
    assert seen[0]["traceparent"] == "00-abc-01"
    assert seen[0]["token-bin"] == b"\x00\x01\x02"
    assert "grpc-timeout" not in seen[0] and "content-type" not in seen[0]


def test_streaming_call() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        stream_id = peer.start(b"/t.S/Chat")
        for word in (b"a", b"b", b"c"):
            peer.h2.send_data(stream_id, framed(word))
            peer.send()
            await peer.settle()
        assert peer.answers[stream_id].messages() == [b"A", b"B", b"C"]  # each answered as it came
        peer.h2.end_stream(stream_id)
        peer.send()
        answer = await peer.answer(stream_id)
        assert answer.status() == OK

    run(test)


def test_a_streaming_call_that_does_not_read_holds_its_client_back() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        stream_id = peer.start(b"/t.S/Deaf")
        message = framed(b"m" * 60_000)
        sent = 0
        while peer.h2.local_flow_control_window(stream_id) >= len(message) and sent < 400:
            peer.h2.send_data(stream_id, message)
            peer.send()
            await peer.settle(2)
            sent += 1
        # 24 MB would have gone through a window reopened as data arrives; the call's 16 MiB window stays shut.
        assert sent < 400
        await still_serving(peer)  # the connection's window was reopened: its other calls go on
        handlers.release.set()
        while peer.h2.local_flow_control_window(stream_id) < len(message):  # reading reopens the window
            await peer.settle()
        peer.h2.send_data(stream_id, message)
        peer.h2.end_stream(stream_id)
        peer.send()
        answer = await peer.answer(stream_id)
        assert answer.status() == OK and len(handlers.received) == sent + 1

    run(test)


def test_rapid_resets_close_the_connection() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        for _ in range(MAX_RESETS_PER_SECOND + 10):
            stream_id = peer.start(b"/t.S/Slow")
            peer.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
            peer.send()
            if peer.transport.closed:
                break
        await peer.settle()
        assert peer.transport.closed
        assert peer.goaway is not None and peer.goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM

    run(test)


def test_a_client_goaway_lets_its_calls_in_flight_finish() -> None:
    """A client shutting down gracefully (GOAWAY NO_ERROR, as grpc-java's `shutdown()`) still gets its answers."""

    async def test(handlers: Handlers, peer: Peer) -> None:
        slow = peer.call(b"/t.S/Slow", framed(b""))
        await peer.settle()
        # Written past the h2 client, which would take no more frames after its own GOAWAY.
        peer.server.data_received(GoAwayFrame(last_stream_id=0, error_code=0).serialize())
        assert not peer.transport.closed
        handlers.release.set()
        assert (await peer.answer(slow)).messages() == [b"done"]
        await asyncio.sleep(0.01)
        assert peer.transport.closed  # with its last call

    run(test)


def test_a_client_goaway_with_an_error_ends_its_calls() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        peer.call(b"/t.S/Slow", framed(b""))
        await peer.settle()
        peer.server.data_received(GoAwayFrame(last_stream_id=0, error_code=2).serialize())
        await peer.settle()
        assert peer.transport.closed and handlers.cancelled == 1

    run(test)
