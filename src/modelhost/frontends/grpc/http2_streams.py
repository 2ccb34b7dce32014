"""What one HTTP/2 server connection keeps and sends (RFC 9113): its table of open streams, the flow-control
windows both ways, our SETTINGS, and the frames the server writes. `http2.py` parses what the client sends into
the same state.

- streams: a table of the open ones, each with its two flow-control windows and whether each side has ended it.
  Client streams have odd, rising ids, so an id at or below the highest seen and not in the table is closed.
- flow control as counters: what we may send (the peer's windows and its SETTINGS), what the peer may send (ours,
  enforced by the receiving side). A stream's receive window is reopened by the caller (`open_window`), which
  holds a streaming call's client back with it.
- header blocks are coded by the caching HPACK encoder of `hpack_cache.py`, split into CONTINUATIONs past the
  client's frame size.
"""

from __future__ import annotations

from modelhost.frontends.grpc.hpack_cache import CachingEncoder
from modelhost.frontends.grpc.http2_frames import (
    CONTINUATION,
    DATA,
    DEFAULT_FRAME_SIZE,
    DEFAULT_WINDOW,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    GOAWAY_PAYLOAD,
    HEAD,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    MAX_CONCURRENT_STREAMS,
    MAX_FRAME_SIZE,
    MAX_HEADER_LIST_SIZE,
    PING,
    RST_STREAM,
    SETTING,
    SETTINGS,
    U32,
    WINDOW_UPDATE,
    ErrorCode,
    StreamClosed,
    frame,
)


class Stream:
    __slots__ = ("local_ended", "recv_window", "remote_ended", "send_window")

    def __init__(self, send_window: int, recv_window: int) -> None:
        self.send_window = send_window  # bytes we may send on it
        self.recv_window = recv_window  # bytes the client may send on it
        self.remote_ended = False
        self.local_ended = False


class Http2Streams:
    """The HTTP/2 state of one server connection, and the frames it sends: bytes out from `data_to_send`."""

    __slots__ = (
        "encoder",
        "highest_inbound_stream_id",
        "initial_window",
        "max_concurrent_streams",
        "max_header_list_size",
        "max_inbound_frame_size",
        "max_outbound_frame_size",
        "out",
        "peer_initial_window",
        "received",
        "recv_window",
        "send_window",
        "streams",
    )

    def __init__(
        self,
        *,
        max_concurrent_streams: int,
        initial_window: int,
        max_frame_size: int,
        max_header_list_size: int,
    ) -> None:
        self.max_concurrent_streams = max_concurrent_streams
        self.initial_window = initial_window  # our SETTINGS_INITIAL_WINDOW_SIZE, and the connection's window
        self.max_inbound_frame_size = max_frame_size
        self.max_header_list_size = max_header_list_size
        self.encoder = CachingEncoder()
        self.streams: dict[int, Stream] = {}
        self.highest_inbound_stream_id = 0
        self.out = bytearray()
        # The peer's settings that matter to us.
        self.max_outbound_frame_size = DEFAULT_FRAME_SIZE
        self.peer_initial_window = DEFAULT_WINDOW
        self.send_window = DEFAULT_WINDOW  # the connection's, for what we send
        self.recv_window = DEFAULT_WINDOW  # the connection's, for what the client sends
        self.received = 0  # bytes received since the connection's window was last reopened

    def initiate(self) -> None:
        """The server's preface (our SETTINGS, in force from now on), and the connection's window opened to ours."""
        settings = b"".join(
            SETTING.pack(code, value)
            for code, value in (
                (MAX_CONCURRENT_STREAMS, self.max_concurrent_streams),
                (INITIAL_WINDOW_SIZE, self.initial_window),
                (MAX_FRAME_SIZE, self.max_inbound_frame_size),
                (MAX_HEADER_LIST_SIZE, self.max_header_list_size),
            )
        )
        self.out += frame(SETTINGS, 0, 0, settings)
        if self.initial_window > DEFAULT_WINDOW:
            self.out += frame(WINDOW_UPDATE, 0, 0, U32.pack(self.initial_window - DEFAULT_WINDOW))
            self.recv_window = self.initial_window

    def _open(self, stream_id: int) -> Stream:
        stream = self.streams.get(stream_id)
        if stream is None or stream.local_ended:
            raise StreamClosed(stream_id)
        return stream

    def _local_end(self, stream_id: int, stream: Stream) -> None:
        stream.local_ended = True
        if stream.remote_ended:
            del self.streams[stream_id]

    def send_headers(
        self, stream_id: int, headers: list[tuple[bytes, bytes]], end_stream: bool = False
    ) -> None:
        stream = self._open(stream_id)
        block = self.encoder.encode(headers)
        limit = self.max_outbound_frame_size
        flags = END_STREAM if end_stream else 0
        if len(block) <= limit:
            self.out += frame(HEADERS, flags | END_HEADERS, stream_id, block)
        else:
            self.out += frame(HEADERS, flags, stream_id, block[:limit])
            for offset in range(limit, len(block), limit):
                last = offset + limit >= len(block)
                self.out += frame(
                    CONTINUATION, END_HEADERS if last else 0, stream_id, block[offset : offset + limit]
                )
        if end_stream:
            self._local_end(stream_id, stream)

    def window(self, stream_id: int) -> int:
        """Bytes we may send on the stream now: its window and the connection's."""
        return min(self.send_window, self._open(stream_id).send_window)

    def send_data(self, stream_id: int, data: bytes | memoryview, end_stream: bool = False) -> None:
        """One DATA frame; the caller keeps it within `window` and `max_outbound_frame_size`."""
        stream = self._open(stream_id)
        size = len(data)
        if size > min(self.send_window, stream.send_window, self.max_outbound_frame_size):
            raise ValueError(f"{size} bytes of DATA past the window or the frame size")
        self.send_window -= size
        stream.send_window -= size
        self.out += HEAD.pack(size >> 16, size & 0xFFFF, DATA, END_STREAM if end_stream else 0, stream_id)
        self.out += data
        if end_stream:
            self._local_end(stream_id, stream)

    def reset_stream(self, stream_id: int, code: ErrorCode) -> None:
        """RST_STREAM, when the stream is still open: its late frames are dropped from now on."""
        if self.streams.pop(stream_id, None) is not None:
            self.out += frame(RST_STREAM, 0, stream_id, U32.pack(code))

    def open_window(self, stream_id: int, increment: int) -> None:
        """Let the client send `increment` more bytes on the stream."""
        stream = self.streams.get(stream_id)
        if stream is None or stream.remote_ended:
            return
        stream.recv_window += increment
        self.out += frame(WINDOW_UPDATE, 0, stream_id, U32.pack(increment))

    def send_ping(self, payload: bytes) -> None:
        self.out += frame(PING, 0, 0, payload)

    def send_goaway(self, code: ErrorCode, debug: bytes = b"") -> None:
        """GOAWAY naming the last stream we take; the streams in flight may still be answered."""
        self.out += frame(GOAWAY, 0, 0, GOAWAY_PAYLOAD.pack(self.highest_inbound_stream_id, code) + debug)

    def data_to_send(self) -> bytes:
        out = bytes(self.out)
        self.out.clear()
        return out
