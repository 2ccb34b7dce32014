"""What one gRPC call sees: its metadata and deadline, the length-prefixed messages of its body, its status.

The wire rules (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md) that the HTTP/2 connection
(`connection.py`) applies to each stream: a message is a 1-byte compressed flag, a 4-byte big-endian length and
the bytes; the call ends with trailers carrying `grpc-status` and a percent-encoded `grpc-message`.
"""

from __future__ import annotations

import base64
import binascii
import urllib.parse
import zlib
from typing import NoReturn

import grpc

# Header names that are HTTP/2 or gRPC machinery, not the call's metadata (what grpcio leaves out too).
_NOT_METADATA = frozenset(
    {b"content-type", b"te", b"grpc-timeout", b"grpc-encoding", b"grpc-accept-encoding"}
)
_TIMEOUT_UNITS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}
ACCEPTED_ENCODINGS = b"identity,deflate,gzip"
# The longest grpc-message sent, in bytes once percent-encoded: well inside the 16 KiB that clients accept for all
# of a response's metadata.
MAX_STATUS_MESSAGE = 4096
# Sent with every UNAVAILABLE (the gRPC retry design's server pushback): try again in a second.
RETRY_PUSHBACK = (b"grpc-retry-pushback-ms", b"1000")
# Bytes inflated at a time from a compressed message: its output grows by these steps, never by zlib's doubling.
_INFLATE_STEP = 1 << 20
# Characters sent as they are in grpc-message; everything else is percent-encoded (the spec's rule).
_MESSAGE_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")


class AbortError(Exception):
    """Ends a call with a status; raised by `CallContext.abort` and by the message rules below."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class CallContext:
    """The part of `grpc.aio.ServicerContext` the services use: metadata in, abort out."""

    __slots__ = ("_metadata", "headers")

    def __init__(self, headers: list[tuple[bytes, bytes]]) -> None:
        self.headers = headers
        self._metadata: tuple[tuple[str, str | bytes], ...] | None = None

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        # Built when asked for: most calls never look (ModelInfer does only when it is traced).
        if self._metadata is None:
            self._metadata = call_metadata(self.headers)
        return self._metadata

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn:
        raise AbortError(code, details)


def call_metadata(headers: list[tuple[bytes, bytes]]) -> tuple[tuple[str, str | bytes], ...]:
    """Custom metadata of a call: every header but the pseudo-headers and gRPC's own; `-bin` values decoded."""
    items: list[tuple[str, str | bytes]] = []
    for name, value in headers:
        if name[:1] == b":" or name in _NOT_METADATA:
            continue
        key = name.decode("latin-1")
        if key.endswith("-bin"):
            try:
                items.append((key, base64.b64decode(value + b"=" * (-len(value) % 4))))
            except binascii.Error:  # the client's mistake: its call ends with a status, not a fault of ours
                raise AbortError(
                    grpc.StatusCode.INVALID_ARGUMENT, f"binary metadata '{key}' is not base64"
                ) from None
        else:
            items.append((key, value.decode("latin-1")))
    return tuple(items)


def parse_timeout(value: bytes) -> float:
    """Seconds of a `grpc-timeout` header (`<at most 8 digits><unit>`)."""
    digits, unit = value[:-1], value[-1:]
    if not (1 <= len(digits) <= 8 and digits.isdigit()) or unit not in _TIMEOUT_UNITS:
        raise AbortError(
            grpc.StatusCode.INVALID_ARGUMENT, f"invalid grpc-timeout '{value.decode('latin-1')}'"
        )
    return int(digits) * _TIMEOUT_UNITS[unit]


def status_trailers(code: grpc.StatusCode, message: str) -> list[tuple[bytes, bytes]]:
    trailers = [(b"grpc-status", str(code.value[0]).encode())]
    if message:
        trailers.append((b"grpc-message", _encoded_message(message)))
    if code is grpc.StatusCode.UNAVAILABLE:
        # When to try again, as HTTP's Retry-After on a 503; a client with a retry policy waits this long.
        trailers.append(RETRY_PUSHBACK)
    return trailers


def _encoded_message(message: str) -> bytes:
    """`message` percent-encoded, cut to MAX_STATUS_MESSAGE bytes with "..." at the end where it is longer: a
    message echoing what the client sent (a 64 KB model name) must not pass clients' 16 KiB metadata limit, which
    they answer with RESOURCE_EXHAUSTED or a closed connection instead of the status."""
    encoded = urllib.parse.quote(message, safe=_MESSAGE_SAFE)
    if len(encoded) > MAX_STATUS_MESSAGE:
        cut = MAX_STATUS_MESSAGE - 3
        escape = encoded.rfind("%", cut - 2, cut)
        encoded = encoded[: escape if escape >= 0 else cut] + "..."
    return encoded.encode("ascii")


def message_prefix(size: int) -> bytes:
    """What goes before an uncompressed message of `size` bytes on the wire."""
    return b"\x00" + size.to_bytes(4, "big")


class MessageReader:
    """Splits a call's body into messages as DATA arrives, enforcing the size limit before buffering one."""

    __slots__ = ("buffer", "encoding", "max_decompressed", "max_size")

    def __init__(self, encoding: bytes | None, max_size: int, max_decompressed: int | None = None) -> None:
        """`max_size`: the largest message as sent; `max_decompressed`: the largest a compressed one may inflate
        to (default `max_size`)."""
        if encoding not in (None, b"identity", b"gzip", b"deflate"):
            name = encoding.decode("latin-1") if encoding else ""
            raise AbortError(
                grpc.StatusCode.UNIMPLEMENTED, f"Compression algorithm '{name}' is not supported"
            )
        self.encoding = encoding
        self.max_size = max_size
        self.max_decompressed = max_size if max_decompressed is None else max_decompressed
        self.buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The messages completed by `data` (usually one, whole, without a copy when it came in one frame)."""
        if not self.buffer and len(data) >= 5 and len(data) == 5 + int.from_bytes(data[1:5], "big"):
            self._check(data[0], len(data) - 5)
            return [self._decoded(data[0], data[5:])]
        self.buffer += data
        messages: list[bytes] = []
        while len(self.buffer) >= 5:
            size = int.from_bytes(self.buffer[1:5], "big")
            self._check(self.buffer[0], size)
            if len(self.buffer) < 5 + size:
                break
            messages.append(self._decoded(self.buffer[0], bytes(self.buffer[5 : 5 + size])))
            del self.buffer[: 5 + size]
        return messages

    def finish(self) -> None:
        """The client ended its side: a partial message left over is an error."""
        if self.buffer:
            raise AbortError(grpc.StatusCode.INTERNAL, "the request ended inside a message")

    def _check(self, flag: int, size: int) -> None:
        if size > self.max_size:
            raise AbortError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"Received message larger than max ({size} vs. {self.max_size})",
            )
        if flag not in (0, 1):
            raise AbortError(grpc.StatusCode.INTERNAL, f"invalid message compression flag {flag}")
        if flag == 1 and self.encoding in (None, b"identity"):
            raise AbortError(grpc.StatusCode.INTERNAL, "a compressed message without a grpc-encoding header")

    def _decoded(self, flag: int, payload: bytes) -> bytes:
        if flag == 0:
            return payload
        wbits = 16 + zlib.MAX_WBITS if self.encoding == b"gzip" else zlib.MAX_WBITS
        try:
            return _inflate(zlib.decompressobj(wbits=wbits), payload, self.max_decompressed)
        except zlib.error as e:
            raise AbortError(grpc.StatusCode.INTERNAL, f"failed to decompress the message: {e}") from e


def _inflate(decompressor: zlib._Decompress, payload: bytes, limit: int) -> bytes:
    """Decompressed bytes, refusing more than `limit` of them (a small compressed message may expand a lot).

    Inflated a step at a time, so that memory grows with what was inflated and stops at the limit: asked for all
    of it at once, zlib doubles its buffer on the way, and a 3 MB bomb held 4 GB before it was refused."""
    data = bytearray()
    pending = payload
    while not decompressor.eof:
        step = decompressor.decompress(pending, _INFLATE_STEP)
        data += step
        if len(data) > limit:
            raise AbortError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"Received message larger than max (more than {limit} bytes once decompressed; "
                "--grpc-max-decompressed-size)",
            )
        pending = decompressor.unconsumed_tail
        if not step and not pending:
            break
    if not decompressor.eof:
        raise zlib.error("truncated compressed data")
    return bytes(data)
