"""modelhost's own HTTP/2 server side (`http2.py`), frame by frame: what it accepts, what it answers, and every
malformed input a client may send ending in GOAWAY with the right code, never another exception."""

from __future__ import annotations

import struct

import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frontends.grpc.http2_peer import REQUEST, WINDOW, Recorder, block, frames, goaway_code, refused, server
from modelhost.frontends.grpc.http2 import Http2Server
from modelhost.frontends.grpc.http2_frames import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PRIORITY_FLAG,
    PUSH_PROMISE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    ErrorCode,
    ProtocolError,
    StreamClosed,
    frame,
)


def test_preface_settings_and_their_acknowledgement() -> None:
    conn, _ = server()
    written = frames(conn.data_to_send())
    settings_frame = written[0]
    assert settings_frame[0] == SETTINGS and settings_frame[1] == 0
    values = dict(struct.unpack(">HL", settings_frame[3][i : i + 6]) for i in range(0, 24, 6))
    assert values == {3: 8, 4: WINDOW, 5: 1 << 16, 6: 16 * 1024}
    # The connection's window opened to ours, then the client's SETTINGS acknowledged.
    assert written[1] == (WINDOW_UPDATE, 0, 0, (WINDOW - 65_535).to_bytes(4, "big"))
    assert written[2] == (SETTINGS, ACK, 0, b"")


def test_a_request_arrives_whole_however_its_bytes_are_cut() -> None:
    message = b"\x00\x00\x00\x00\x05hello"
    data = frame(HEADERS, END_HEADERS, 1, block()) + frame(DATA, END_STREAM, 1, message)
    for cut in (1, 3, 9, 10, len(data) - 1):
        conn, recorder = server()
        for start in range(0, len(data), cut):
            conn.receive(data[start : start + cut])
        assert recorder.events == [
            ("request", 1, REQUEST),
            ("data", 1, message, len(message)),
            ("end", 1),
        ]
    # The preface itself, byte by byte.
    recorder = Recorder()
    conn = Http2Server(
        recorder,
        max_concurrent_streams=8,
        initial_window=WINDOW,
        max_frame_size=1 << 16,
        max_header_list_size=16 * 1024,
    )
    for byte in PREFACE + frame(SETTINGS, 0, 0) + data:
        conn.receive(bytes([byte]))
    assert [e[0] for e in recorder.events] == ["request", "data", "end"]


def test_continuations_padding_and_priority() -> None:
    conn, recorder = server()
    encoded = block([*REQUEST, (b"x-meta", b"v" * 300)])
    padded = bytes([3]) + bytes(5) + encoded[:100] + b"\x00\x00\x00"  # pad length, priority, fragment, pad
    conn.receive(frame(HEADERS, PADDED | PRIORITY_FLAG, 1, padded))
    conn.receive(frame(CONTINUATION, 0, 1, encoded[100:200]))
    conn.receive(frame(CONTINUATION, END_HEADERS, 1, encoded[200:]))
    conn.receive(frame(DATA, PADDED | END_STREAM, 1, bytes([4]) + b"abc" + bytes(4)))
    assert recorder.events[0] == ("request", 1, [*REQUEST, (b"x-meta", b"v" * 300)])
    assert recorder.events[1:] == [("data", 1, b"abc", 8), ("end", 1)]


def test_the_clients_table_size_is_capped_and_a_flood_of_changes_stays_two() -> None:
    conn, _ = server()
    conn.receive(frame(HEADERS, END_HEADERS | END_STREAM, 1, block()))
    conn.receive(frame(SETTINGS, 0, 0, struct.pack(">HL", 1, 2**32 - 1)))
    assert conn.encoder.header_table.maxsize == 4096  # the most we use, whatever the client allows
    flood = b"".join(struct.pack(">HL", 1, size) for size in (0, 1) * 5000)
    for _ in range(5):
        conn.receive(frame(SETTINGS, 0, 0, flood))
    assert conn.encoder.table_size_changes == [0, 1]
    conn.receive(frame(SETTINGS, 0, 0, struct.pack(">HL", 1, 0) * 2))  # the same size twice
    conn.data_to_send()
    conn.send_headers(1, [(b":status", b"200")], end_stream=True)
    (headers,) = frames(conn.data_to_send())
    # One dynamic table size update to 0 (RFC 7541 6.3), then the field: a client's decoder follows.
    assert headers[3][:1] == b"\x20"
    decoder = hpack.Decoder()
    assert decoder.decode(headers[3], raw=True) == [(b":status", b"200")]
    assert decoder.header_table.maxsize == 0


def test_pings_are_answered_and_ours_acknowledged() -> None:
    conn, recorder = server()
    conn.data_to_send()
    conn.receive(frame(PING, 0, 0, b"abcdefgh"))
    assert frames(conn.data_to_send()) == [(PING, ACK, 0, b"abcdefgh")]
    conn.send_ping(b"12345678")
    assert frames(conn.data_to_send()) == [(PING, 0, 0, b"12345678")]
    conn.receive(frame(PING, ACK, 0, b"12345678"))
    assert recorder.events == [("ping",), ("ping-ack", b"12345678")]


def test_a_client_reset_and_late_frames_of_closed_streams() -> None:
    conn, recorder = server()
    conn.receive(frame(HEADERS, END_HEADERS, 1, block()))
    conn.receive(frame(RST_STREAM, 0, 1, (8).to_bytes(4, "big")))
    assert recorder.events[-1] == ("reset", 1, 8)
    with pytest.raises(StreamClosed):
        conn.send_headers(1, [(b":status", b"200")])
    conn.receive(frame(HEADERS, END_HEADERS, 3, block()))
    conn.reset_stream(3, ErrorCode.CANCEL)
    assert frames(conn.data_to_send())[-1] == (RST_STREAM, 0, 3, (8).to_bytes(4, "big"))
    # What a client sends before it learns of the reset is dropped; DATA still counts against the connection.
    before = len(recorder.events)
    conn.receive(frame(DATA, 0, 3, b"x" * 100))
    conn.receive(frame(WINDOW_UPDATE, 0, 3, (10).to_bytes(4, "big")))
    conn.receive(frame(RST_STREAM, 0, 3, (8).to_bytes(4, "big")))
    conn.receive(frame(HEADERS, END_HEADERS | END_STREAM, 3, block([(b"grpc-status", b"1")])))
    assert len(recorder.events) == before
    assert conn.recv_window == WINDOW - 100
    # The dynamic table followed the dropped block: the next request still decodes.
    conn.receive(frame(HEADERS, END_HEADERS | END_STREAM, 5, block()))
    assert recorder.events[-3:] == [("request", 5, REQUEST), ("ended-with-headers", 5), ("end", 5)]


def test_the_connections_window_is_reopened_once_half_is_used() -> None:
    conn, _ = server()
    conn.data_to_send()
    for stream_id in (1, 3, 5):
        conn.receive(frame(HEADERS, END_HEADERS, stream_id, block()))
        for _ in range(3):
            conn.receive(frame(DATA, 0, stream_id, bytes(60_000)))
    updates = [p for t, _, s, p in frames(conn.data_to_send()) if t == WINDOW_UPDATE and s == 0]
    assert updates == [(540_000).to_bytes(4, "big")]
    assert conn.recv_window == WINDOW
    # A stream's own window is the caller's to reopen.
    assert conn.streams[1].recv_window == WINDOW - 180_000
    conn.open_window(1, 180_000)
    assert frames(conn.data_to_send()) == [(WINDOW_UPDATE, 0, 1, (180_000).to_bytes(4, "big"))]


def test_a_second_stream_error_resets_only_that_stream() -> None:
    conn, recorder = server()
    conn.receive(frame(HEADERS, END_HEADERS | END_STREAM, 1, block()))
    conn.receive(frame(HEADERS, END_HEADERS, 3, block()))
    conn.data_to_send()
    conn.receive(frame(DATA, 0, 1, b"after the end"))  # stream 1 is half closed: a stream error
    conn.receive(frame(WINDOW_UPDATE, 0, 3, (0).to_bytes(4, "big")))  # an increment of 0 on a stream
    assert frames(conn.data_to_send()) == [
        (RST_STREAM, 0, 1, int(ErrorCode.STREAM_CLOSED).to_bytes(4, "big")),
        (RST_STREAM, 0, 3, int(ErrorCode.PROTOCOL_ERROR).to_bytes(4, "big")),
    ]
    assert recorder.events[-2:] == [
        ("reset", 1, ErrorCode.STREAM_CLOSED),
        ("reset", 3, ErrorCode.PROTOCOL_ERROR),
    ]
    conn.receive(frame(HEADERS, END_HEADERS | END_STREAM, 5, block()))  # the connection goes on
    assert recorder.events[-1] == ("end", 5)


def test_a_client_goaway_stops_the_connection() -> None:
    conn, recorder = server()
    conn.receive(frame(GOAWAY, 0, 0, struct.pack(">LL", 0, 2)) + frame(HEADERS, END_HEADERS, 1, block()))
    assert recorder.events == [("goaway", 2)]


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (frame(DATA, 0, 0, b"abcd"), ErrorCode.PROTOCOL_ERROR),
        (frame(DATA, 0, 1, b"abcd"), ErrorCode.PROTOCOL_ERROR),  # an idle stream
        (frame(HEADERS, END_HEADERS, 0, block()), ErrorCode.PROTOCOL_ERROR),
        (frame(HEADERS, END_HEADERS, 2, block()), ErrorCode.PROTOCOL_ERROR),  # even: the server's
        (
            frame(HEADERS, END_HEADERS, 3, block()) + frame(HEADERS, END_HEADERS, 1, block()),
            ErrorCode.PROTOCOL_ERROR,
        ),
        (
            frame(HEADERS, END_HEADERS, 1, block()) + frame(HEADERS, END_HEADERS, 1, block()),
            ErrorCode.PROTOCOL_ERROR,
        ),
        (frame(HEADERS, 0, 1, block()) + frame(PING, 0, 0, bytes(8)), ErrorCode.PROTOCOL_ERROR),
        (frame(HEADERS, 0, 1, block()) + frame(CONTINUATION, END_HEADERS, 3, b""), ErrorCode.PROTOCOL_ERROR),
        (frame(CONTINUATION, END_HEADERS, 1, block()), ErrorCode.PROTOCOL_ERROR),
        (frame(HEADERS, END_HEADERS, 1, b"\xff\xff\xff\xff"), ErrorCode.COMPRESSION_ERROR),
        (frame(HEADERS, END_HEADERS | PADDED, 1, b"\x09abc"), ErrorCode.PROTOCOL_ERROR),
        (frame(HEADERS, END_HEADERS | PADDED, 1, b""), ErrorCode.FRAME_SIZE_ERROR),
        (frame(HEADERS, END_HEADERS | PRIORITY_FLAG, 1, b"ab"), ErrorCode.FRAME_SIZE_ERROR),
        (frame(PRIORITY, 0, 1, b"abc"), ErrorCode.FRAME_SIZE_ERROR),
        (frame(PRIORITY, 0, 0, bytes(5)), ErrorCode.PROTOCOL_ERROR),
        (frame(RST_STREAM, 0, 0, bytes(4)), ErrorCode.PROTOCOL_ERROR),
        (frame(RST_STREAM, 0, 1, bytes(4)), ErrorCode.PROTOCOL_ERROR),
        (frame(RST_STREAM, 0, 1, bytes(3)), ErrorCode.FRAME_SIZE_ERROR),
        (frame(SETTINGS, 0, 1), ErrorCode.PROTOCOL_ERROR),
        (frame(SETTINGS, ACK, 0, bytes(6)), ErrorCode.FRAME_SIZE_ERROR),
        (frame(SETTINGS, 0, 0, bytes(5)), ErrorCode.FRAME_SIZE_ERROR),
        (frame(SETTINGS, 0, 0, struct.pack(">HL", 2, 2)), ErrorCode.PROTOCOL_ERROR),
        (frame(SETTINGS, 0, 0, struct.pack(">HL", 4, 2**31)), ErrorCode.FLOW_CONTROL_ERROR),
        (frame(SETTINGS, 0, 0, struct.pack(">HL", 5, 100)), ErrorCode.PROTOCOL_ERROR),
        (frame(SETTINGS, 0, 0, struct.pack(">HL", 5, 2**24)), ErrorCode.PROTOCOL_ERROR),
        (frame(PUSH_PROMISE, END_HEADERS, 1, bytes(4)), ErrorCode.PROTOCOL_ERROR),
        (frame(PING, 0, 0, bytes(7)), ErrorCode.FRAME_SIZE_ERROR),
        (frame(PING, 0, 1, bytes(8)), ErrorCode.PROTOCOL_ERROR),
        (frame(GOAWAY, 0, 1, bytes(8)), ErrorCode.PROTOCOL_ERROR),
        (frame(GOAWAY, 0, 0, bytes(7)), ErrorCode.FRAME_SIZE_ERROR),
        (frame(WINDOW_UPDATE, 0, 0, bytes(3)), ErrorCode.FRAME_SIZE_ERROR),
        (frame(WINDOW_UPDATE, 0, 0, bytes(4)), ErrorCode.PROTOCOL_ERROR),
        (frame(WINDOW_UPDATE, 0, 7, b"\x00\x00\x00\x01"), ErrorCode.PROTOCOL_ERROR),
        (frame(WINDOW_UPDATE, 0, 0, b"\x7f\xff\xff\xff"), ErrorCode.FLOW_CONTROL_ERROR),
        (b"\x01\x00\x01" + bytes(6), ErrorCode.FRAME_SIZE_ERROR),  # 65,537 bytes announced: over our limit
    ],
)
def test_protocol_errors_end_in_goaway(data: bytes, code: ErrorCode) -> None:
    conn, _ = server()
    conn.data_to_send()
    refused(conn, data, code)


def test_a_client_past_its_windows_is_a_flow_control_error() -> None:
    conn, _ = server()
    conn.receive(frame(HEADERS, END_HEADERS, 1, block()))
    for _ in range(WINDOW // 65_536):
        conn.receive(frame(DATA, 0, 1, bytes(65_536)))
    conn.data_to_send()
    refused(conn, frame(DATA, 0, 1, bytes(65_536)), ErrorCode.FLOW_CONTROL_ERROR)


def test_the_preface_and_the_first_frame_are_checked() -> None:
    for data in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", b"POST"):
        conn, _ = server()
        conn.preface_seen = conn.settings_seen = False
        conn.data_to_send()
        refused(conn, data, ErrorCode.PROTOCOL_ERROR)
    conn, _ = server()
    conn.preface_seen = conn.settings_seen = False
    conn.data_to_send()
    refused(conn, PREFACE + frame(PING, 0, 0, bytes(8)), ErrorCode.PROTOCOL_ERROR)


def test_too_many_streams_and_oversized_header_blocks() -> None:
    conn, _ = server(max_streams=2)
    conn.receive(frame(HEADERS, END_HEADERS, 1, block()) + frame(HEADERS, END_HEADERS, 3, block()))
    conn.data_to_send()
    refused(conn, frame(HEADERS, END_HEADERS, 5, block()), ErrorCode.PROTOCOL_ERROR)
    # Decoded past the header list limit.
    conn, _ = server()
    conn.data_to_send()
    big = block([*REQUEST, (b"x-big", b"v" * 20_000)])
    refused(conn, frame(HEADERS, END_HEADERS, 1, big), ErrorCode.ENHANCE_YOUR_CALM)
    # A CONTINUATION flood is cut off by its encoded size, before it is decoded.
    conn, _ = server()
    conn.data_to_send()
    conn.receive(frame(HEADERS, 0, 1, b"\x00" * 60_000))
    refused(conn, frame(CONTINUATION, 0, 1, b"\x00" * 10_000), ErrorCode.ENHANCE_YOUR_CALM)


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 12), st.integers(0, 255), st.integers(0, 9), st.binary(max_size=40)))
)
def test_random_frames_only_ever_end_in_goaway(spec: list[tuple[int, int, int, bytes]]) -> None:
    """Whatever frames a client sends, the server parses them or refuses the connection: no other exception."""
    conn, _ = server()
    data = b"".join(frame(ftype, flags, stream_id, payload) for ftype, flags, stream_id, payload in spec)
    try:
        conn.receive(data)
    except ProtocolError:
        goaway_code(conn)
