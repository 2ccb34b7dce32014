"""The caching HPACK coders give exactly what hpack's own give, whatever the dynamic table goes through."""

from __future__ import annotations

import hpack

from modelhost.frontends.grpc.hpack_cache import CACHE_ENTRIES, CachingDecoder, CachingEncoder

CALL = [
    (b":method", b"POST"),
    (b":path", b"/inference.GRPCInferenceService/ModelInfer"),
    (b"te", b"trailers"),
]
OTHER = [(b":method", b"POST"), (b":path", b"/inference.GRPCInferenceService/ServerLive"), (b"x-id", b"7")]


def header_sets() -> list[list[tuple[bytes, bytes]]]:
    """Repeats (cacheable), new headers (table insertions), evictions and a timeout that changes every call."""
    sets = [CALL, CALL, OTHER, CALL, OTHER, OTHER]
    sets += [[*CALL, (b"grpc-timeout", f"{n}m".encode())] for n in range(5)]
    sets += [[*CALL, (b"big", bytes([65 + n % 26]) * 1500)] for n in range(8)]  # evicts older entries
    sets += [CALL] * 3 + [[(b"n", str(n).encode())] for n in range(CACHE_ENTRIES + 10)] + [CALL, OTHER] * 3
    return sets


def test_decoder_matches_hpack() -> None:
    client = hpack.Encoder()
    plain, caching = hpack.Decoder(), CachingDecoder(1 << 20)
    for i, headers in enumerate(header_sets()):
        if i == 30:  # the client shrinks its table: a size update leads the next block
            client.header_table_size = 1024
        block = client.encode(headers)
        assert caching.decode(block, raw=True) == plain.decode(block, raw=True) == headers


def test_encoder_matches_hpack() -> None:
    plain, caching = hpack.Encoder(), CachingEncoder()
    peer = hpack.Decoder()
    for i, headers in enumerate(header_sets()):
        if i == 30:  # the peer asked for a smaller table
            plain.header_table_size = caching.header_table_size = 1024
        block = caching.encode(headers)
        assert block == plain.encode(headers)
        assert peer.decode(block, raw=True) == headers


def test_steady_state_comes_from_the_cache() -> None:
    client = hpack.Encoder()
    decoder = CachingDecoder(1 << 20)
    blocks = [client.encode(CALL) for _ in range(3)]
    assert blocks[1] == blocks[2]  # every field indexed: the same bytes each call
    for block in blocks:
        decoder.decode(block, raw=True)
    assert list(decoder._cache) == [blocks[1]]
