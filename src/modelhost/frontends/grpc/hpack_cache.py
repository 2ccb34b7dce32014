"""HPACK coders that remember the header blocks of a connection's steady state.

A gRPC client sends the same header block for every call to a method once its dynamic table holds those
headers (every field an index), and the server answers every call with the same headers and trailers. While
the dynamic table does not change, the same bytes decode to the same headers and the same headers encode to
the same bytes, so both are looked up instead of coded again: HPACK was ~15% of a small call's CPU (profile in
benchmarks/README.md, "gRPC"). A block that adds to the table or resizes it is coded as usual and empties the
cache, which then refills in the new state.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import hpack

# Distinct blocks remembered per connection and direction: a client that sends a new block each time (say, a
# changing literal) is coded as usual once this many are kept.
CACHE_ENTRIES = 64
# The largest request header block remembered: a call's steady-state block is some tens of bytes, and a client's
# large blocks (up to 64 KiB each) are not kept for the connection's life.
MAX_CACHED_BLOCK = 1024


class _TableWatch:
    """Whether a dynamic table is still as it was when last remembered (entries are only added at the front)."""

    __slots__ = ("front", "length", "maxsize", "table")

    def __init__(self, table: Any) -> None:
        self.table = table
        self.remember()

    def remember(self) -> None:
        entries = self.table.dynamic_entries
        self.length = len(entries)
        self.front = entries[0] if entries else None
        self.maxsize = self.table.maxsize

    def unchanged(self) -> bool:
        entries = self.table.dynamic_entries
        return (
            len(entries) == self.length
            and self.table.maxsize == self.maxsize
            and (not entries or entries[0] is self.front)
        )


class CachingDecoder(hpack.Decoder):
    def __init__(self, max_header_list_size: int) -> None:
        super().__init__(max_header_list_size=max_header_list_size)
        self._cache: dict[bytes, list[Any]] = {}
        self._watch = _TableWatch(self.header_table)

    def decode(self, data: bytes, raw: bool = False) -> Iterable[Any]:
        cacheable = raw and type(data) is bytes and len(data) <= MAX_CACHED_BLOCK
        if cacheable:
            if self._watch.unchanged():
                hit = self._cache.get(data)
                if hit is not None:
                    return list(hit)
            else:
                self._cache.clear()
                self._watch.remember()
        headers = list(super().decode(data, raw))
        if cacheable:
            if not self._watch.unchanged():
                self._cache.clear()
                self._watch.remember()
            elif len(self._cache) < CACHE_ENTRIES:
                self._cache[data] = list(headers)
        return headers


class CachingEncoder(hpack.Encoder):
    def __init__(self) -> None:
        super().__init__()
        self._cache: dict[tuple[Any, ...], bytes] = {}
        self._watch = _TableWatch(self.header_table)

    def encode(self, headers: Any, huffman: bool = True) -> bytes:
        # A pending table size update goes at the head of the next block: that block is coded as usual.
        if not isinstance(headers, list) or self.header_table.resized:
            return bytes(super().encode(headers, huffman))
        key = (huffman, *headers)
        if self._watch.unchanged():
            hit = self._cache.get(key)
            if hit is not None:
                return hit
        else:
            self._cache.clear()
            self._watch.remember()
        block = bytes(super().encode(headers, huffman))
        if not self._watch.unchanged():
            self._cache.clear()
            self._watch.remember()
        elif len(self._cache) < CACHE_ENTRIES:
            self._cache[key] = block
        return block
