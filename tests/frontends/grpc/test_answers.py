"""How a connection writes its answers (`answers.py`), driven in memory by an h2 client: trailers-only statuses,
DATA held back by the client's window and the transport's backpressure, and a client that never reads cut off."""

from __future__ import annotations

import asyncio
import urllib.parse

import pytest

from frontends.grpc.peer import NOT_FOUND, OK, UNAVAILABLE, Handlers, Peer, framed, run, still_serving
from modelhost.frontends.grpc import answers
from modelhost.frontends.grpc.calls import MAX_STATUS_MESSAGE


def test_unavailable_says_when_to_try_again() -> None:
    async def test(handlers: Handlers, peer: Peer) -> None:
        answer = await peer.answer(peer.call(b"/t.S/Full", framed(b"")))
        assert answer.status() == UNAVAILABLE
        assert (b"grpc-retry-pushback-ms", b"1000") in answer.headers  # trailers-only: status in the headers
        other = await peer.answer(peer.call(b"/t.S/Fail", framed(b"")))
        assert not any(name == b"grpc-retry-pushback-ms" for name, _ in other.headers + other.trailers)

    run(test)


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
