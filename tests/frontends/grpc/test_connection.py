"""The gRPC HTTP/2 connection, driven in memory by an h2 client: calls, statuses, flow control, bad input."""

from __future__ import annotations

import asyncio
import gzip
import urllib.parse
import zlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import h2.errors
import pytest
from hyperframe.frame import Frame, GoAwayFrame, PingFrame

from frontends.grpc.peer import MemoryTransport, Peer, framed, request_headers, unary
from modelhost.frontends.grpc import answers
from modelhost.frontends.grpc.calls import MAX_STATUS_MESSAGE, AbortError
from modelhost.frontends.grpc.connection import GrpcConnection, GrpcLimits
from modelhost.frontends.grpc.dispatch import MAX_RESETS_PER_SECOND
from modelhost.frontends.grpc.methods import Method

OK, CANCELLED, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND = 0, 1, 2, 3, 4, 5
RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE = 8, 12, 13, 14


class Handlers:
    """Methods under test; `cancelled` counts handlers stopped by a reset or a deadline."""

    def __init__(self) -> None:
        self.cancelled = 0
        self.received: list[bytes] = []
        self.release = asyncio.Event()

    async def echo(self, request: bytes) -> bytes:
        return request

    async def slow(self, request: bytes) -> bytes:
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return b"done"

    async def big(self, request: bytes) -> bytes:
        return b"x" * int(request)

    async def fail(self, request: bytes) -> bytes:
        raise AbortError(grpc.StatusCode.NOT_FOUND, "no model 'é' at 100%")

    async def bug(self, request: bytes) -> bytes:
        raise RuntimeError("a bug")

    async def full(self, request: bytes) -> bytes:
        raise AbortError(grpc.StatusCode.UNAVAILABLE, "Exceeds maximum queue size")

    async def long(self, request: bytes) -> bytes:
        """A NOT_FOUND naming a 64 KB model name, as the service words it."""
        raise AbortError(
            grpc.StatusCode.NOT_FOUND, f"Request for unknown model: '{'é' * 32_000}' is not found"
        )

    async def chat(self, requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        async for request in requests:
            self.received.append(request)
            yield request.upper()

    async def deaf(self, requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        """A streaming call that reads nothing until released."""
        await self.release.wait()
        async for request in requests:
            self.received.append(request)
        yield b"end"

    def methods(self) -> dict[bytes, Method]:
        table = {
            f"/t.S/{name.title()}".encode(): unary(getattr(self, name), name)
            for name in ("echo", "slow", "big", "fail", "bug", "long", "full")
        }
        for name in ("chat", "deaf"):
            table[f"/t.S/{name.title()}".encode()] = Method(name, True, bytes, getattr(self, name), bytes)
        return table


def run(test: Any) -> None:
    async def body() -> None:
        handlers = Handlers()
        await test(handlers, Peer(handlers.methods()))

    asyncio.run(body())


async def still_serving(peer: Peer) -> None:
    answer = await peer.answer(peer.call(b"/t.S/Echo", framed(b"ping")))
    assert answer.status() == OK and answer.messages() == [b"ping"]


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


def test_unavailable_says_when_to_try_again() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        answer = await peer.answer(peer.call(b"/t.S/Full", framed(b"")))
        assert answer.status() == UNAVAILABLE
        assert (b"grpc-retry-pushback-ms", b"1000") in answer.headers  # trailers-only: status in the headers
        other = await peer.answer(peer.call(b"/t.S/Fail", framed(b"")))
        assert not any(name == b"grpc-retry-pushback-ms" for name, _ in other.headers + other.trailers)

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


def test_a_long_status_message_is_cut_to_fit_clients_metadata_limit() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        answer = await peer.answer(peer.call(b"/t.S/Long", framed(b"")))
        encoded = dict(answer.trailers or answer.headers)[b"grpc-message"]
        assert len(encoded) <= MAX_STATUS_MESSAGE
        text = urllib.parse.unquote(encoded.decode("ascii"))
        assert text.startswith("Request for unknown model: 'éé") and text.endswith("...")
        assert answer.status() == NOT_FOUND
        await still_serving(peer)

    run(test)


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


def test_a_client_that_does_not_read_gets_no_more_than_its_window() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        stream_id = peer.call(b"/t.S/Big", framed(b"1000000"))
        peer.reading = False
        for _ in range(5):
            await peer.settle()
            await asyncio.sleep(0.01)
        # The default window of a client's stream, and no more.
        assert len(peer.answers[stream_id].data) == 65_535
        peer.reading = True
        peer.h2.acknowledge_received_data(65_535, stream_id)
        answer = await peer.answer(stream_id)
        assert answer.status() == OK and len(answer.messages()[0]) == 1_000_000

    run(test)


def test_a_paused_transport_holds_data_back() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        peer.server.pause_writing()
        stream_id = peer.call(b"/t.S/Big", framed(b"30000"))
        await asyncio.sleep(0.01)
        peer.receive()
        assert len(peer.answers[stream_id].data) == 0
        peer.server.resume_writing()
        assert len((await peer.answer(stream_id)).messages()[0]) == 30000

    run(test)


def test_a_client_that_floods_acknowledgements_and_never_reads_is_cut_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SETTINGS and PINGs are answered by the protocol itself; unread, those answers would pile up for ever."""
    monkeypatch.setattr(answers, "MAX_UNREAD_BYTES", 64 * 1024)

    async def test(handlers: Handlers, peer: Peer) -> None:
        peer.server.pause_writing()  # the client's socket is full: it reads nothing
        settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty SETTINGS frame, acknowledged each time
        for _ in range(20_000):
            peer.server.data_received(settings * 10)
            if peer.transport.closed:
                break
        assert peer.transport.closed
        assert len(peer.transport.written) == 0  # dropped, not held

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


def frames(data: bytearray) -> list[Frame]:
    out = []
    while data:
        frame, length = Frame.parse_frame_header(memoryview(data[:9]))
        frame.parse_body(memoryview(data[9 : 9 + length]))
        out.append(frame)
        data = data[9 + length :]
    return out


def test_connection_lost_cancels_calls() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        peer.call(b"/t.S/Slow", framed(b""))
        await peer.settle()
        peer.server.connection_lost(None)
        await peer.settle()
        assert handlers.cancelled == 1 and not peer.server.calls

    run(test)


# -- timeouts -------------------------------------------------------------------------------------------------------


def run_with(test: Any, **timeouts: float) -> None:
    async def body() -> None:
        handlers = Handlers()
        await test(handlers, Peer(handlers.methods(), **timeouts))

    asyncio.run(body())


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


# -- keepalive, the client's pings, connection age -------------------------------------------------------------


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


def frame_types(data: bytes) -> set[int]:
    """The types of the HTTP/2 frames in `data` (whole frames, from its start)."""
    types, offset = set(), 0
    while offset + 9 <= len(data):
        length = int.from_bytes(data[offset : offset + 3], "big")
        types.add(data[offset + 3])
        offset += 9 + length
    return types


def test_past_the_grace_a_connection_is_closed_with_its_calls() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        peer.call(b"/t.S/Slow", framed(b""))
        await asyncio.sleep(0.4)
        assert peer.transport.closed
        assert handlers.cancelled == 1

    run_with(test, max_connection_age=50, max_connection_age_grace=50)
