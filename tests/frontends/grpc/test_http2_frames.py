"""HTTP/2's frame format (`http2_frames.py`): a frame's 9-byte header, and a padded frame's payload."""

from __future__ import annotations

import pytest

from modelhost.frontends.grpc.http2_frames import (
    END_STREAM,
    HEAD,
    HEADERS,
    PREFACE,
    ErrorCode,
    ProtocolError,
    frame,
    unpad,
)


def test_a_frame_is_its_length_type_flags_and_stream_then_its_payload() -> None:
    data = frame(HEADERS, END_STREAM, 0x1234567, b"x" * 70_000)
    assert data[:9] == bytes([0x01, 0x11, 0x70, HEADERS, END_STREAM, 0x01, 0x23, 0x45, 0x67])
    high, low, ftype, flags, stream_id = HEAD.unpack_from(data)
    assert (high << 16 | low, ftype, flags, stream_id) == (70_000, HEADERS, END_STREAM, 0x1234567)
    assert data[9:] == b"x" * 70_000
    assert frame(HEADERS, 0, 1) == bytes([0, 0, 0, HEADERS, 0, 0, 0, 0, 1])
    assert len(PREFACE) == 24


def test_padding_is_taken_off_and_checked() -> None:
    assert unpad(bytes([2]) + b"abc" + bytes(2)) == b"abc"
    assert unpad(bytes([0]) + b"abc") == b"abc"
    with pytest.raises(ProtocolError) as empty:
        unpad(b"")
    assert empty.value.code == ErrorCode.FRAME_SIZE_ERROR
    with pytest.raises(ProtocolError) as past:
        unpad(bytes([3]) + b"ab")
    assert past.value.code == ErrorCode.PROTOCOL_ERROR
