"""What the server sends (`http2_streams.py`): headers continued past the client's frame size, DATA within the
windows, streams closed once both sides end them; through `Http2Server`, and on the stream table alone."""

from __future__ import annotations

import random
import struct

import hpack
import pytest

from frontends.grpc.http2_peer import block, frames, server
from modelhost.frontends.grpc.http2_frames import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    ErrorCode,
    StreamClosed,
    frame,
)
from modelhost.frontends.grpc.http2_streams import Http2Streams, Stream


def test_an_answer_with_flow_control() -> None:
    conn, recorder = server()
    conn.receive(frame(HEADERS, END_HEADERS | END_STREAM, 1, block()))
    conn.data_to_send()
    assert conn.window(1) == 65_535  # the client's default windows
    conn.send_headers(1, [(b":status", b"200")])
    conn.send_data(1, b"x" * 16_384)
    with pytest.raises(ValueError):
        conn.send_data(1, b"x" * 16_385)  # past the client's frame size
    assert conn.window(1) == 65_535 - 16_384
    # The client's SETTINGS move its streams' windows; WINDOW_UPDATEs open them.
    conn.receive(frame(SETTINGS, 0, 0, struct.pack(">HL", 4, 100_000) + struct.pack(">HL", 5, 32_768)))
    assert conn.max_outbound_frame_size == 32_768
    assert conn.window(1) == 65_535 - 16_384  # the connection's window is the smaller now
    conn.receive(frame(WINDOW_UPDATE, 0, 0, (50_000).to_bytes(4, "big")))
    assert conn.window(1) == 100_000 - 16_384
    assert recorder.events[-2:] == [("window",), ("window",)]
    conn.send_headers(1, [(b"grpc-status", b"0")], end_stream=True)
    with pytest.raises(StreamClosed):  # ended by both sides: closed and forgotten
        conn.window(1)
    assert conn.streams == {}
    written = frames(conn.data_to_send())
    assert [(t, f) for t, f, _, _ in written] == [
        (HEADERS, END_HEADERS),
        (DATA, 0),
        (SETTINGS, ACK),
        (HEADERS, END_HEADERS | END_STREAM),
    ]
    decoder = hpack.Decoder()
    assert decoder.decode(written[0][3], raw=True) == [(b":status", b"200")]
    assert decoder.decode(written[3][3], raw=True) == [(b"grpc-status", b"0")]


def test_a_header_block_larger_than_the_clients_frames_is_continued() -> None:
    conn, _ = server()
    conn.receive(frame(HEADERS, END_HEADERS | END_STREAM, 1, block()))
    conn.data_to_send()
    headers = [
        (b":status", b"200"),
        (b"grpc-message", bytes(random.Random(1).randbytes(20_000).hex(), "ascii")),
    ]
    conn.send_headers(1, headers, end_stream=True)
    written = frames(conn.data_to_send())
    assert len(written) >= 2 and all(len(p) <= 16_384 for *_, p in written)
    assert [(t, f) for t, f, _, _ in written] == [
        (HEADERS, END_STREAM),
        *[(CONTINUATION, 0)] * (len(written) - 2),
        (CONTINUATION, END_HEADERS),
    ]
    assert (
        hpack.Decoder(max_header_list_size=1 << 20).decode(b"".join(p for *_, p in written), raw=True)
        == headers
    )


def streams() -> Http2Streams:
    return Http2Streams(
        max_concurrent_streams=8, initial_window=65_535, max_frame_size=1 << 16, max_header_list_size=1024
    )


def test_the_default_window_needs_no_update_and_our_settings_are_sent() -> None:
    state = streams()
    state.initiate()
    ((ftype, flags, stream_id, payload),) = frames(state.data_to_send())
    assert (ftype, flags, stream_id) == (SETTINGS, 0, 0)
    assert dict(struct.unpack(">HL", payload[i : i + 6]) for i in range(0, 24, 6))[4] == 65_535
    assert state.data_to_send() == b""  # taken once


def test_data_stays_within_both_windows_and_a_closed_stream_takes_nothing() -> None:
    state = streams()
    state.streams[1] = Stream(send_window=100, recv_window=65_535)
    state.streams[3] = Stream(send_window=65_535, recv_window=65_535)
    assert state.window(1) == 100 and state.window(3) == 65_535
    with pytest.raises(ValueError):
        state.send_data(1, bytes(101))
    for _ in range(4):
        state.send_data(3, bytes(16_000))  # the client's largest frame
    assert state.window(1) == 100 and state.window(3) == 1535
    state.send_data(1, bytes(100), end_stream=True)
    state.streams[5] = Stream(send_window=65_535, recv_window=65_535)
    assert state.window(5) == 1435  # the connection's window, shared by its streams
    with pytest.raises(StreamClosed):  # ended by us, still open to the client's data
        state.send_data(1, b"x")
    assert 1 in state.streams
    state.data_to_send()
    state.reset_stream(1, ErrorCode.CANCEL)
    state.reset_stream(1, ErrorCode.CANCEL)  # closed already: no second RST_STREAM
    assert frames(state.data_to_send()) == [(RST_STREAM, 0, 1, int(ErrorCode.CANCEL).to_bytes(4, "big"))]
    with pytest.raises(StreamClosed):
        state.send_headers(7, [(b":status", b"200")])  # never opened


def test_a_streams_window_reopens_only_while_the_client_may_send() -> None:
    state = streams()
    state.streams[1] = Stream(send_window=65_535, recv_window=1000)
    state.open_window(1, 500)
    assert state.streams[1].recv_window == 1500
    state.streams[1].remote_ended = True
    state.open_window(1, 500)
    state.open_window(7, 500)  # no such stream
    assert frames(state.data_to_send()) == [(WINDOW_UPDATE, 0, 1, (500).to_bytes(4, "big"))]


def test_goaway_names_the_last_stream_taken() -> None:
    state = streams()
    state.highest_inbound_stream_id = 9
    state.send_goaway(ErrorCode.ENHANCE_YOUR_CALM, b"why")
    assert frames(state.data_to_send()) == [
        (GOAWAY, 0, 0, struct.pack(">LL", 9, ErrorCode.ENHANCE_YOUR_CALM) + b"why")
    ]
