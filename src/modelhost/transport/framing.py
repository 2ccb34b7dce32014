"""Length-prefixed msgpack frames over a stream, with writes coalesced once per event-loop turn.

At tens of thousands of requests per second the cost of a hop is its system calls, not its bytes: every frame
queued during one turn of the loop leaves in one write, and one read brings in as many frames as arrived.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Generic, TypeVar, cast

import msgspec

log = logging.getLogger("modelhost.transport")

M = TypeVar("M")
_HEADER = 4  # little-endian frame length
# A frame larger than this is a bug or a corrupt stream (request bodies are bounded by --http-max-input-size).
MAX_FRAME = 1 << 31


class FramedProtocol(asyncio.Protocol, Generic[M]):
    """Decodes the frames it receives into `M` and hands them to `received`; `send` queues a frame."""

    def __init__(self, decoder: msgspec.msgpack.Decoder[M]) -> None:
        self._decoder = decoder
        self._encoder = msgspec.msgpack.Encoder()
        self._in = bytearray()
        self._out = bytearray()
        self._flush_scheduled = False
        self.transport: asyncio.Transport | None = None

    # -- to implement ------------------------------------------------------------------------------------------

    def received(self, message: M) -> None:
        raise NotImplementedError  # pragma: no cover - abstract

    # -- asyncio.Protocol --------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._in:
            self._in += data
            buffer: bytes | bytearray = self._in
        else:
            buffer = data
        view = memoryview(buffer)
        offset = 0
        end = len(buffer)
        while end - offset >= _HEADER:
            size = int.from_bytes(view[offset : offset + _HEADER], "little")
            if end - offset - _HEADER < size:
                break
            start = offset + _HEADER
            # A frame inside `data` is decoded in place; one assembled in `_in` is copied out first, since `_in`
            # is reused (the message's memoryviews must outlive it).
            frame = view[start : start + size] if buffer is data else bytes(view[start : start + size])
            offset = start + size
            try:
                message = self._decoder.decode(frame)
            except msgspec.DecodeError:
                log.exception("closing a transport connection: undecodable frame")
                self._abort()
                return
            self.received(message)
        if buffer is data:
            # Messages may hold views of `data` (immutable bytes): nothing is released here.
            self._in = bytearray(view[offset:]) if offset < end else bytearray()
        else:
            view.release()  # a bytearray with a view exported cannot be resized
            del self._in[:offset]

    # -- sending -----------------------------------------------------------------------------------------------

    def send(self, message: Any) -> None:
        out = self._out
        start = len(out)
        out += b"\0\0\0\0"
        self._encoder.encode_into(message, out, start + _HEADER)
        out[start : start + _HEADER] = (len(out) - start - _HEADER).to_bytes(_HEADER, "little")
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._out:
            return
        out, self._out = self._out, bytearray()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(out)

    def _abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
