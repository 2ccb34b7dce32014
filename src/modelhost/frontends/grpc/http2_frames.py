"""HTTP/2's frame format (RFC 9113, 4 and 6): frame types, flags, settings, error codes, and the few packings
that `http2_streams.py` (what the server sends) and `http2.py` (what it receives) share."""

from __future__ import annotations

import enum
import struct

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
DEFAULT_FRAME_SIZE = 16_384
MAX_WINDOW = 2**31 - 1

# Frame header: length as 8 + 16 bits, type, flags, stream id (with its reserved bit).
HEAD = struct.Struct(">BHBBL")
U32 = struct.Struct(">L")
SETTING = struct.Struct(">HL")
GOAWAY_PAYLOAD = struct.Struct(">LL")  # the last stream id, the error code (then debug data)


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


def frame(ftype: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    size = len(payload)
    return HEAD.pack(size >> 16, size & 0xFFFF, ftype, flags, stream_id) + payload


def unpad(payload: bytes) -> bytes:
    """A PADDED frame's payload without its pad length byte and its padding."""
    if not payload:
        raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "a padded frame without its pad length")
    pad = payload[0]
    if pad >= len(payload):
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "padding past the end of the frame")
    return payload[1 : len(payload) - pad]
