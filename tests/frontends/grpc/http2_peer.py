"""A client's frames written by hand against `Http2Server`, and a record of the events the server tells."""

from __future__ import annotations

import struct

import hpack
import pytest

from modelhost.frontends.grpc.http2 import Http2Server
from modelhost.frontends.grpc.http2_frames import (
    GOAWAY,
    PING,
    PREFACE,
    SETTINGS,
    ErrorCode,
    ProtocolError,
    frame,
)

WINDOW = 1 << 20


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    def on_request(self, stream_id: int, headers: list[tuple[bytes, bytes]], end_stream: bool) -> None:
        self.events.append(("request", stream_id, [tuple(h) for h in headers]))
        if end_stream:
            self.events.append(("ended-with-headers", stream_id))

    def on_data(self, stream_id: int, data: bytes, size: int) -> None:
        self.events.append(("data", stream_id, data, size))

    def on_end(self, stream_id: int) -> None:
        self.events.append(("end", stream_id))

    def on_reset(self, stream_id: int, code: int) -> None:
        self.events.append(("reset", stream_id, code))

    def on_window_opened(self) -> None:
        self.events.append(("window",))

    def on_ping(self) -> None:
        self.events.append(("ping",))

    def on_ping_ack(self, payload: bytes) -> None:
        self.events.append(("ping-ack", payload))

    def on_goaway(self, code: int) -> None:
        self.events.append(("goaway", code))


def server(max_streams: int = 8) -> tuple[Http2Server, Recorder]:
    recorder = Recorder()
    conn = Http2Server(
        recorder,
        max_concurrent_streams=max_streams,
        initial_window=WINDOW,
        max_frame_size=1 << 16,
        max_header_list_size=16 * 1024,
    )
    conn.initiate()
    conn.receive(PREFACE + frame(SETTINGS, 0, 0))
    return conn, recorder


def frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    """What the server wrote: (type, flags, stream, payload) per frame."""
    out, pos = [], 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 3], "big")
        ftype, flags = data[pos + 3], data[pos + 4]
        stream = int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
        out.append((ftype, flags, stream, data[pos + 9 : pos + 9 + length]))
        pos += 9 + length
    assert pos == len(data)
    return out


def goaway_code(conn: Http2Server) -> int:
    written = frames(conn.data_to_send())
    codes = [struct.unpack(">LL", p[:8])[1] for t, _, _, p in written if t == GOAWAY]
    assert len(codes) == 1, written
    return codes[0]


def refused(conn: Http2Server, data: bytes, code: ErrorCode) -> None:
    with pytest.raises(ProtocolError) as raised:
        conn.receive(data)
    assert raised.value.code == code
    assert goaway_code(conn) == code
    conn.receive(frame(PING, 0, 0, b"12345678"))  # nothing more is parsed or answered
    assert conn.data_to_send() == b""


REQUEST = [(b":method", b"POST"), (b":path", b"/t.S/M"), (b"content-type", b"application/grpc")]


def block(headers: list[tuple[bytes, bytes]] = REQUEST) -> bytes:
    return bytes(hpack.Encoder().encode(headers))
