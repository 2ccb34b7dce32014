"""Content-Encoding of request bodies and Accept-Encoding of responses (gzip and deflate, as Triton)."""

from __future__ import annotations

import zlib

from modelhost.errors import InvalidArgument, UnsupportedMediaType


class InflatedTooLarge(InvalidArgument):
    """A compressed body that inflates past the size limit (the caller words the message)."""


def decode_body(body: bytes, encoding: str, max_size: int) -> bytes:
    """Inflate a request body, never past `max_size` bytes (a small gzip bomb must not become gigabytes)."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding == "gzip":
        wbits = 16 + zlib.MAX_WBITS
    elif encoding == "deflate":
        wbits = zlib.MAX_WBITS
    else:
        raise UnsupportedMediaType(f"unsupported Content-Encoding '{encoding}'; supported: gzip, deflate")
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(body, max_size + 1)
    except zlib.error as e:
        # "deflate" in the wild is sometimes raw deflate without the zlib header.
        if encoding == "deflate":
            try:
                inflater = zlib.decompressobj(-zlib.MAX_WBITS)
                out = inflater.decompress(body, max_size + 1)
            except zlib.error:
                raise InvalidArgument(f"failed to decompress the request body ({encoding}): {e}") from e
        else:
            raise InvalidArgument(f"failed to decompress the request body ({encoding}): {e}") from e
    if len(out) > max_size or inflater.unconsumed_tail:
        raise InflatedTooLarge(
            f"decompressed request body exceeds the maximum allowed size of {max_size} bytes"
        )
    return out


def choose_encoding(accept_encoding: str) -> str:
    """The response encoding for an Accept-Encoding header: gzip, deflate or "" (identity), by q weight."""
    best, best_q = "", 0.0
    for item in accept_encoding.split(","):
        parts = item.strip().split(";")
        name = parts[0].strip().lower()
        q = 1.0
        for param in parts[1:]:
            key, _, value = param.strip().partition("=")
            if key.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if name in ("gzip", "deflate") and q > best_q:
            best, best_q = name, q
    return best


def encode_body(body: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    else:
        compressor = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS)
    return compressor.compress(body) + compressor.flush()
