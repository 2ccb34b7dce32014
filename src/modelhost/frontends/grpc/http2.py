"""The server side of one HTTP/2 connection (RFC 9113), keeping only the state a gRPC server needs: the frames
the client sends, parsed into the state of `http2_streams.py` and told to the connection as events.

Written instead of using h2 because of a measurement (benchmarks/README.md, "gRPC's own HTTP/2"): h2's
per-frame state machines, event objects and checks made gRPC's wire layer cost 3x HTTP/1.1's per call. Here a
frame is parsed with one `struct` call and handed to the connection as a method call; hpack (with the caching
coders of `hpack_cache.py`) still codes the header blocks. What is kept, and why:

- streams (`http2_streams.py`): the open ones with their windows. A client's stream id at or below the highest
  seen and not in the table is closed, and its late frames are dropped (after a reset of ours the client may
  still be sending).
- flow control as counters, ours enforced: sending past it is a connection error. The connection's own receive
  window is reopened here once half of it is used; a stream's is reopened by the caller.
- SETTINGS and PING are acknowledged here; header blocks arrive whole (HEADERS and its CONTINUATIONs, bounded).
- every violation that h2 made a connection error is one here: GOAWAY with the code, and `ProtocolError`
  raised to the caller, which closes the transport.

Server push, priorities and the client's stream limits do not matter to a gRPC server and are not kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import hpack

from modelhost.frontends.grpc.hpack_cache import CachingDecoder
from modelhost.frontends.grpc.http2_frames import (
    ACK,
    CONTINUATION,
    DEFAULT_FRAME_SIZE,
    ENABLE_PUSH,
    END_HEADERS,
    END_STREAM,
    GOAWAY_PAYLOAD,
    HEAD,
    HEADER_TABLE_SIZE,
    INITIAL_WINDOW_SIZE,
    MAX_FRAME_SIZE,
    MAX_WINDOW,
    PADDED,
    PING,
    PREFACE,
    PRIORITY_FLAG,
    SETTING,
    SETTINGS,
    U32,
    WINDOW_UPDATE,
    ErrorCode,
    ProtocolError,
    frame,
    unpad,
)
from modelhost.frontends.grpc.http2_streams import Http2Streams, Stream

# The most of its dynamic table our HPACK encoder uses, whatever the client allows (RFC 7541 4.2 lets an encoder
# use less): a larger table only adds entries to search, and the client picks the size, not us.
MAX_ENCODER_TABLE = 4096


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


class Http2Server(Http2Streams):
    """The HTTP/2 state of one server connection: bytes in through `receive`, bytes out from `data_to_send`."""

    __slots__ = (
        "_handlers",
        "continuing",
        "decoder",
        "events",
        "max_header_block",
        "pending",
        "preface_seen",
        "settings_seen",
        "stopped",
    )

    def __init__(
        self,
        events: Events,
        *,
        max_concurrent_streams: int,
        initial_window: int,
        max_frame_size: int,
        max_header_list_size: int,
    ) -> None:
        super().__init__(
            max_concurrent_streams=max_concurrent_streams,
            initial_window=initial_window,
            max_frame_size=max_frame_size,
            max_header_list_size=max_header_list_size,
        )
        self.events = events
        # A header block's encoded bytes, across its CONTINUATIONs: Huffman codes take at most ~4x the text.
        self.max_header_block = 4 * max_header_list_size
        self.decoder = CachingDecoder(max_header_list_size)
        self.pending = b""  # a frame's first bytes, until the rest arrives
        self.preface_seen = False
        self.settings_seen = False  # the client's first frame must be SETTINGS
        self.stopped = False  # GOAWAY for an error sent, or the caller closed: nothing more is parsed
        # A header block being continued: its stream, whether it ends the stream, its bytes so far.
        self.continuing: tuple[int, bool, bytearray] | None = None
        self._handlers: tuple[Callable[[int, int, bytes], None], ...] = (
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
            unpack = HEAD.unpack_from
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
            self.out += frame(WINDOW_UPDATE, 0, 0, U32.pack(self.received))
            self.recv_window += self.received
            self.received = 0
        if flags & PADDED:
            payload = unpad(payload)
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
            payload = unpad(payload)
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
        self.streams[stream_id] = Stream(self.peer_initial_window, self.initial_window)
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
            self.events.on_reset(stream_id, U32.unpack(payload)[0])

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
            code, value = SETTING.unpack_from(payload, offset)
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
        code = GOAWAY_PAYLOAD.unpack_from(payload)[1]
        if code != ErrorCode.NO_ERROR:
            self.stopped = True  # the client gave up on the connection: nothing more is read
        # NO_ERROR: it opens no more streams, and those open may still be answered (RFC 9113 6.8).
        self.events.on_goaway(code)

    def _window_update(self, flags: int, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "WINDOW_UPDATE of other than 4 bytes")
        increment = U32.unpack(payload)[0] & 0x7FFFFFFF
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
