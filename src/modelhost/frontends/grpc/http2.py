"""The server side of one HTTP/2 connection (RFC 9113), keeping only the state a gRPC server needs.

Written instead of using h2 because of a measurement (benchmarks/README.md, "gRPC's own HTTP/2"): h2's
per-frame state machines, event objects and checks made gRPC's wire layer cost 3x HTTP/1.1's per call. Here a
frame is parsed with one `struct` call and handed to the connection as a method call; hpack (with the caching
coders of `hpack_cache.py`) still codes the header blocks. What is kept, and why:

- streams: a table of the open ones, each with its two flow-control windows and whether each side has ended it.
  Client streams have odd, rising ids, so an id at or below the highest seen and not in the table is closed, and
  its late frames are dropped (after a reset of ours the client may still be sending).
- flow control as counters: what we may send (the peer's windows and its SETTINGS), what the peer may send (ours,
  enforced: sending past it is a connection error). The connection's own receive window is reopened here once
  half of it is used; a stream's is reopened by the caller, which holds a streaming call's client back with it.
- SETTINGS and PING are acknowledged here; header blocks arrive whole (HEADERS and its CONTINUATIONs, bounded).
- every violation that h2 made a connection error is one here: GOAWAY with the code, and `ProtocolError`
  raised to the caller, which closes the transport.

Server push, priorities and the client's stream limits do not matter to a gRPC server and are not kept.
"""

from __future__ import annotations

import enum
import struct
from typing import Protocol

import hpack

from modelhost.frontends.grpc.hpack_cache import CachingDecoder, CachingEncoder

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types.
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    range(10)
)
# Flags.
END_STREAM = ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20
# Settings.
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE = 1, 2, 3, 4, 5
MAX_HEADER_LIST_SIZE = 6

DEFAULT_WINDOW = 65_535
# The most of its dynamic table our HPACK encoder uses, whatever the client allows (RFC 7541 4.2 lets an encoder
# use less): a larger table only adds entries to search, and the client picks the size, not us.
MAX_ENCODER_TABLE = 4096
DEFAULT_FRAME_SIZE = 16_384
MAX_WINDOW = 2**31 - 1

# Frame header: length as 8 + 16 bits, type, flags, stream id (with its reserved bit).
_HEAD = struct.Struct(">BHBBL")
_U32 = struct.Struct(">L")
_SETTING = struct.Struct(">HL")
_GOAWAY = struct.Struct(">LL")


class ErrorCode(enum.IntEnum):
    NO_ERROR = 0x0
    PROTOCOL_ERROR = 0x1
    INTERNAL_ERROR = 0x2
    FLOW_CONTROL_ERROR = 0x3
    SETTINGS_TIMEOUT = 0x4
    STREAM_CLOSED = 0x5
    FRAME_SIZE_ERROR = 0x6
    REFUSED_STREAM = 0x7
    CANCEL = 0x8
    COMPRESSION_ERROR = 0x9
    CONNECT_ERROR = 0xA
    ENHANCE_YOUR_CALM = 0xB
    INADEQUATE_SECURITY = 0xC
    HTTP_1_1_REQUIRED = 0xD


class ProtocolError(Exception):
    """The peer broke the protocol: GOAWAY with `code` is queued, and the connection must be closed."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class StreamClosed(Exception):
    """Sending on a stream that is closed (reset, or ended by both sides) or was never opened."""


class Events(Protocol):
    """What the connection is told, in the order the frames arrived."""

    def on_request(self, stream_id: int, headers: list[tuple[bytes, bytes]], end_stream: bool) -> None: ...

    def on_data(self, stream_id: int, data: bytes, size: int) -> None:
        """`size`: what the frame took of the windows, its padding included."""

    def on_end(self, stream_id: int) -> None: ...

    def on_reset(self, stream_id: int, code: int) -> None: ...

    def on_window_opened(self) -> None: ...

    def on_ping(self) -> None: ...

    def on_ping_ack(self, payload: bytes) -> None: ...

    def on_goaway(self, code: int) -> None: ...


class _Stream:
    __slots__ = ("local_ended", "recv_window", "remote_ended", "send_window")

    def __init__(self, send_window: int, recv_window: int) -> None:
        self.send_window = send_window  # bytes we may send on it
        self.recv_window = recv_window  # bytes the client may send on it
        self.remote_ended = False
        self.local_ended = False


def frame(ftype: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    size = len(payload)
    return _HEAD.pack(size >> 16, size & 0xFFFF, ftype, flags, stream_id) + payload


class Http2Server:
    """The HTTP/2 state of one server connection: bytes in through `receive`, bytes out from `data_to_send`."""

    def __init__(
        self,
        events: Events,
        *,
        max_concurrent_streams: int,
        initial_window: int,
        max_frame_size: int,
        max_header_list_size: int,
    ) -> None:
        self.events = events
        self.max_concurrent_streams = max_concurrent_streams
        self.initial_window = initial_window  # our SETTINGS_INITIAL_WINDOW_SIZE, and the connection's window
        self.max_inbound_frame_size = max_frame_size
        self.max_header_list_size = max_header_list_size
        # A header block's encoded bytes, across its CONTINUATIONs: Huffman codes take at most ~4x the text.
        self.max_header_block = 4 * max_header_list_size
        self.encoder = CachingEncoder()
        self.decoder = CachingDecoder(max_header_list_size)
        self.streams: dict[int, _Stream] = {}
        self.highest_inbound_stream_id = 0
        self.out = bytearray()
        self.pending = b""  # a frame's first bytes, until the rest arrives
        self.preface_seen = False
        self.settings_seen = False  # the client's first frame must be SETTINGS
        self.stopped = False  # GOAWAY for an error sent, or the caller closed: nothing more is parsed
        # The peer's settings that matter to us.
        self.max_outbound_frame_size = DEFAULT_FRAME_SIZE
        self.peer_initial_window = DEFAULT_WINDOW
        self.send_window = DEFAULT_WINDOW  # the connection's, for what we send
        self.recv_window = DEFAULT_WINDOW  # the connection's, for what the client sends
        self.received = 0  # bytes received since the connection's window was last reopened
        # A header block being continued: its stream, whether it ends the stream, its bytes so far.
        self.continuing: tuple[int, bool, bytearray] | None = None
        self._handlers = (
            self._data,
            self._headers,
            self._priority,
            self._rst_stream,
            self._settings,
            self._push_promise,
            self._ping,
            self._goaway,
            self._window_update,
            self._continuation,
        )

    # -- starting ----------------------------------------------------------------------------------------------

    def initiate(self) -> None:
        """The server's preface (our SETTINGS, in force from now on), and the connection's window opened to ours."""
        settings = b"".join(
            _SETTING.pack(code, value)
            for code, value in (
                (MAX_CONCURRENT_STREAMS, self.max_concurrent_streams),
                (INITIAL_WINDOW_SIZE, self.initial_window),
                (MAX_FRAME_SIZE, self.max_inbound_frame_size),
                (MAX_HEADER_LIST_SIZE, self.max_header_list_size),
            )
        )
        self.out += frame(SETTINGS, 0, 0, settings)
        if self.initial_window > DEFAULT_WINDOW:
            self.out += frame(WINDOW_UPDATE, 0, 0, _U32.pack(self.initial_window - DEFAULT_WINDOW))
            self.recv_window = self.initial_window

    # -- receiving ---------------------------------------------------------------------------------------------

    def receive(self, data: bytes) -> None:
        """Parse what arrived and tell the connection; raises `ProtocolError` once GOAWAY is queued."""
        if self.stopped:
            return
        if self.pending:
            data = self.pending + data
            self.pending = b""
        pos = 0
        end = len(data)
        try:
            if not self.preface_seen:
                if end < len(PREFACE):
                    if not PREFACE.startswith(data):
                        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "invalid HTTP/2 preface")
                    self.pending = data
                    return
                if not data.startswith(PREFACE):
                    raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "invalid HTTP/2 preface")
                self.preface_seen = True
                pos = len(PREFACE)
            handlers = self._handlers
            unpack = _HEAD.unpack_from
            while end - pos >= 9:
                high, low, ftype, flags, stream_id = unpack(data, pos)
                length = high << 16 | low
                if length > self.max_inbound_frame_size:
                    raise ProtocolError(
                        ErrorCode.FRAME_SIZE_ERROR,
                        f"a frame of {length} bytes, over the {self.max_inbound_frame_size} allowed",
                    )
                start = pos + 9
                if end - start < length:
                    break
                pos = start + length
                payload = data[start:pos]
                stream_id &= 0x7FFFFFFF
                if self.continuing is not None and ftype != CONTINUATION:
                    raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "a header block was not continued")
                if not self.settings_seen:
                    if ftype != SETTINGS or flags & ACK:
                        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "the first frame was not SETTINGS")
                    self.settings_seen = True
                if ftype < 10:
                    handlers[ftype](flags, stream_id, payload)
                # Frames of unknown types are ignored (RFC 9113, 5.5).
                if self.stopped:
                    return
        except ProtocolError as e:
            self.send_goaway(e.code, str(e).encode()[:256])
            self.stopped = True
            raise
        if pos < end:
            self.pending = data[pos:]

    def _data(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "DATA on stream 0")
        size = len(payload)
        self.recv_window -= size
        if self.recv_window < 0:
            raise ProtocolError(ErrorCode.FLOW_CONTROL_ERROR, "DATA past the connection's window")
        # Reopened once half of it is used: one WINDOW_UPDATE, not one per frame.
        self.received += size
        if self.received >= self.initial_window // 2:
            self.out += frame(WINDOW_UPDATE, 0, 0, _U32.pack(self.received))
            self.recv_window += self.received
            self.received = 0
        if flags & PADDED:
            payload = _unpad(payload)
        stream = self.streams.get(stream_id)
        if stream is None:
            if stream_id > self.highest_inbound_stream_id:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")
            return  # a closed stream's late bytes: counted against the connection's window only
        if stream.remote_ended:
            self._stream_error(stream_id, ErrorCode.STREAM_CLOSED)
            return
        stream.recv_window -= size
        if stream.recv_window < 0:
            raise ProtocolError(ErrorCode.FLOW_CONTROL_ERROR, f"DATA past stream {stream_id}'s window")
        if size:
            self.events.on_data(stream_id, payload, size)
        if flags & END_STREAM:
            self._remote_end(stream_id)

    def _headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "HEADERS on stream 0")
        if flags & PADDED:
            payload = _unpad(payload)
        if flags & PRIORITY_FLAG:
            if len(payload) < 5:
                raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "HEADERS too short for its priority")
            payload = payload[5:]
        if flags & END_HEADERS:
            self._header_block(stream_id, bool(flags & END_STREAM), payload)
        else:
            self._check_block_size(len(payload))
            self.continuing = (stream_id, bool(flags & END_STREAM), bytearray(payload))

    def _continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        continuing = self.continuing
        if continuing is None or continuing[0] != stream_id:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "CONTINUATION without a header block to continue")
        block = continuing[2]
        block += payload
        self._check_block_size(len(block))
        if flags & END_HEADERS:
            self.continuing = None
            self._header_block(stream_id, continuing[1], bytes(block))

    def _check_block_size(self, size: int) -> None:
        if size > self.max_header_block:
            raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, f"a header block of more than {size} bytes")

    def _header_block(self, stream_id: int, end_stream: bool, block: bytes) -> None:
        # Decoded whatever becomes of the stream: the dynamic table must follow the client's.
        try:
            headers: list[tuple[bytes, bytes]] = self.decoder.decode(block, raw=True)  # type: ignore[assignment]
        except hpack.OversizedHeaderListError as e:
            raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, f"oversized header block: {e}") from None
        except hpack.HPACKError as e:
            raise ProtocolError(ErrorCode.COMPRESSION_ERROR, f"invalid header block: {e}") from None
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers
            if stream.remote_ended:
                self._stream_error(stream_id, ErrorCode.STREAM_CLOSED)
            elif not end_stream:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"a second header block on stream {stream_id}")
            else:
                self._remote_end(stream_id)
            return
        if stream_id <= self.highest_inbound_stream_id:
            if end_stream:
                return  # trailers of a stream we reset or closed, sent before the client knew: dropped
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"a new stream {stream_id} at or below a used id")
        if stream_id % 2 == 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"a client opened even stream {stream_id}")
        if len(self.streams) >= self.max_concurrent_streams:
            raise ProtocolError(
                ErrorCode.PROTOCOL_ERROR, f"more than {self.max_concurrent_streams} concurrent streams"
            )
        self.highest_inbound_stream_id = stream_id
        self.streams[stream_id] = _Stream(self.peer_initial_window, self.initial_window)
        self.events.on_request(stream_id, headers, end_stream)
        if end_stream:
            self._remote_end(stream_id)

    def _remote_end(self, stream_id: int) -> None:
        stream = self.streams.get(stream_id)
        if stream is None:  # reset by the connection as it took the frame's first part (a refused call)
            return
        stream.remote_ended = True
        if stream.local_ended:
            del self.streams[stream_id]
        self.events.on_end(stream_id)

    def _priority(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "PRIORITY on stream 0")
        if len(payload) != 5:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "PRIORITY of other than 5 bytes")

    def _rst_stream(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on stream 0")
        if len(payload) != 4:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "RST_STREAM of other than 4 bytes")
        if stream_id > self.highest_inbound_stream_id:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"RST_STREAM on idle stream {stream_id}")
        if self.streams.pop(stream_id, None) is not None:
            self.events.on_reset(stream_id, _U32.unpack(payload)[0])

    def _settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id != 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "a SETTINGS acknowledgement with a payload")
            return
        if len(payload) % 6:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS of a length not a multiple of 6")
        window_changed = False
        for offset in range(0, len(payload), 6):
            code, value = _SETTING.unpack_from(payload, offset)
            if code == HEADER_TABLE_SIZE:
                self._table_size(min(value, MAX_ENCODER_TABLE))
            elif code == ENABLE_PUSH:
                if value > 1:
                    raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"SETTINGS_ENABLE_PUSH of {value}")
            elif code == INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ProtocolError(
                        ErrorCode.FLOW_CONTROL_ERROR, f"SETTINGS_INITIAL_WINDOW_SIZE of {value}"
                    )
                delta = value - self.peer_initial_window
                self.peer_initial_window = value
                for stream in self.streams.values():
                    stream.send_window += delta
                    if stream.send_window > MAX_WINDOW:
                        raise ProtocolError(ErrorCode.FLOW_CONTROL_ERROR, "a stream's window overflowed")
                window_changed = True
            elif code == MAX_FRAME_SIZE:
                if not DEFAULT_FRAME_SIZE <= value <= 2**24 - 1:
                    raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"SETTINGS_MAX_FRAME_SIZE of {value}")
                self.max_outbound_frame_size = value
            # Others (and unknown settings) change nothing a server sends.
        self.out += frame(SETTINGS, ACK, 0)
        if window_changed:
            self.events.on_window_opened()

    def _table_size(self, size: int) -> None:
        """The encoder's table resized; the next header block signals the smallest size since the last block,
        then the final one (RFC 7541 4.2), however many SETTINGS changed it in between: a client that flips it
        in a flood of SETTINGS leaves two pending changes, not one per setting."""
        encoder = self.encoder
        encoder.header_table_size = size
        changes = encoder.table_size_changes
        if changes:
            smallest = min(changes)
            encoder.table_size_changes = [smallest, size] if smallest != size else [size]
            # hpack marks a resize only when the size differs from the last one: the pending change still counts.
            encoder.header_table.resized = True

    def _push_promise(self, flags: int, stream_id: int, payload: bytes) -> None:
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "a client sent PUSH_PROMISE")

    def _ping(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id != 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "PING on a stream")
        if len(payload) != 8:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "PING of other than 8 bytes")
        if flags & ACK:
            self.events.on_ping_ack(payload)
        else:
            self.out += frame(PING, ACK, 0, payload)
            self.events.on_ping()

    def _goaway(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id != 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "GOAWAY on a stream")
        if len(payload) < 8:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "GOAWAY of fewer than 8 bytes")
        code = _GOAWAY.unpack_from(payload)[1]
        if code != ErrorCode.NO_ERROR:
            self.stopped = True  # the client gave up on the connection: nothing more is read
        # NO_ERROR: it opens no more streams, and those open may still be answered (RFC 9113 6.8).
        self.events.on_goaway(code)

    def _window_update(self, flags: int, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "WINDOW_UPDATE of other than 4 bytes")
        increment = _U32.unpack(payload)[0] & 0x7FFFFFFF
        if stream_id == 0:
            if increment == 0:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "a WINDOW_UPDATE of 0")
            self.send_window += increment
            if self.send_window > MAX_WINDOW:
                raise ProtocolError(ErrorCode.FLOW_CONTROL_ERROR, "the connection's window overflowed")
        else:
            stream = self.streams.get(stream_id)
            if stream is None:
                if stream_id > self.highest_inbound_stream_id:
                    raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {stream_id}")
                return
            if increment == 0:
                self._stream_error(stream_id, ErrorCode.PROTOCOL_ERROR)
                return
            stream.send_window += increment
            if stream.send_window > MAX_WINDOW:
                self._stream_error(stream_id, ErrorCode.FLOW_CONTROL_ERROR)
                return
        self.events.on_window_opened()

    def _stream_error(self, stream_id: int, code: ErrorCode) -> None:
        """A stream the client broke is reset, and its call ended as if the client had reset it."""
        self.reset_stream(stream_id, code)
        self.events.on_reset(stream_id, code)

    # -- sending -----------------------------------------------------------------------------------------------

    def _open(self, stream_id: int) -> _Stream:
        stream = self.streams.get(stream_id)
        if stream is None or stream.local_ended:
            raise StreamClosed(stream_id)
        return stream

    def _local_end(self, stream_id: int, stream: _Stream) -> None:
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
        self.out += _HEAD.pack(size >> 16, size & 0xFFFF, DATA, END_STREAM if end_stream else 0, stream_id)
        self.out += data
        if end_stream:
            self._local_end(stream_id, stream)

    def reset_stream(self, stream_id: int, code: ErrorCode) -> None:
        """RST_STREAM, when the stream is still open: its late frames are dropped from now on."""
        if self.streams.pop(stream_id, None) is not None:
            self.out += frame(RST_STREAM, 0, stream_id, _U32.pack(code))

    def open_window(self, stream_id: int, increment: int) -> None:
        """Let the client send `increment` more bytes on the stream."""
        stream = self.streams.get(stream_id)
        if stream is None or stream.remote_ended:
            return
        stream.recv_window += increment
        self.out += frame(WINDOW_UPDATE, 0, stream_id, _U32.pack(increment))

    def send_ping(self, payload: bytes) -> None:
        self.out += frame(PING, 0, 0, payload)

    def send_goaway(self, code: ErrorCode, debug: bytes = b"") -> None:
        """GOAWAY naming the last stream we take; the streams in flight may still be answered."""
        self.out += frame(GOAWAY, 0, 0, _GOAWAY.pack(self.highest_inbound_stream_id, code) + debug)

    def data_to_send(self) -> bytes:
        out = bytes(self.out)
        self.out.clear()
        return out


def _unpad(payload: bytes) -> bytes:
    if not payload:
        raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "a padded frame without its pad length")
    pad = payload[0]
    if pad >= len(payload):
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "padding past the end of the frame")
    return payload[1 : len(payload) - pad]
