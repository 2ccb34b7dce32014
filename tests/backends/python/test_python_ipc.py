"""The python backend's transport: shared-memory arenas, tensors across them, framed messages."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from modelhost.backends.python.ipc import (
    INLINE,
    INLINE_BYTES,
    SHM_DIR,
    Arena,
    FrameReader,
    SegmentMap,
    as_refs,
    deserialize_bytes,
    encode,
    put_tensor,
    read_tensor,
    serialize_bytes,
    shared_blocks,
    view_tensor,
)


@pytest.fixture
def arena() -> Iterator[Arena]:
    a = Arena(f"modelhost_test_{os.getpid()}_", 4096, 4096)
    yield a
    a.close()


def test_large_blocks_are_reused_after_free_and_coalesce() -> None:
    arena = Arena(f"modelhost_test_big_{os.getpid()}_", 1 << 20, 1 << 20)
    try:
        first = arena.alloc(100_000)
        second = arena.alloc(100_000)
        assert first != second
        arena.free(*first)
        arena.free(*second)
        assert arena.in_use() == 0
        # The two freed neighbours merged: a block of both their sizes fits where they were.
        assert arena.alloc(200_000) == first
    finally:
        arena.close()


def test_small_blocks_are_reused_by_size(arena: Arena) -> None:
    block = arena.alloc(1000)
    arena.free(*block)
    assert arena.alloc(900) == block  # the same 1 KiB size class
    other = arena.alloc(1000)
    assert other != block
    assert arena.in_use() == 2048


def test_a_block_larger_than_a_segment_gets_a_segment_of_its_own(arena: Arena) -> None:
    small = arena.alloc(100)
    big = arena.alloc(10_000)
    assert big[0] != small[0]
    assert arena.in_use() >= 10_000


def test_segments_are_removed_on_close() -> None:
    arena = Arena(f"modelhost_test_close_{os.getpid()}_", 4096, 4096)
    segment, _ = arena.alloc(10)
    assert os.path.exists(os.path.join(SHM_DIR, segment))
    arena.close()
    assert not os.path.exists(os.path.join(SHM_DIR, segment))


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.array([[True, False]]),
        np.arange(6, dtype=np.int64)[::2],  # not contiguous
        np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3)),  # contiguous, not in C order
        np.array(2.5),  # no dimensions
        np.zeros((0, 4), dtype=np.float16),
        np.array([b"a", b"", "\u00e9".encode(), b"\x00\xff"], dtype=object).reshape(2, 2),
    ],
)
@pytest.mark.parametrize("repeat", [1, 200], ids=["in the message", "in shared memory"])
def test_tensors_cross_through_shared_memory(arena: Arena, array: np.ndarray, repeat: int) -> None:
    array = np.concatenate([array] * repeat) if array.ndim else array
    message = encode({"inputs": [put_tensor(arena, "T", array)]})  # as a message carries it
    [ref] = as_refs(FrameReader().feed(message)[0]["inputs"])
    segments = SegmentMap()
    back = view_tensor(segments, ref)
    assert back.shape == array.shape
    assert back.tolist() == array.tolist()
    in_message = ref.offset == INLINE
    # Small tensors travel in the message and take no shared memory, so there is no block to free.
    assert in_message == (
        array.nbytes <= INLINE_BYTES if array.dtype != object else ref.nbytes <= INLINE_BYTES
    )
    assert (arena.in_use() == 0) == in_message
    assert shared_blocks([ref]) == ([] if in_message else [(ref.segment, ref.offset)])
    # What a receiver keeps after the block is freed: in memory of its own, copied only out of shared memory.
    owned = read_tensor(segments, ref)
    assert owned.tolist() == array.tolist()
    if array.dtype != object and array.size:
        assert not np.shares_memory(owned, back)
    if array.dtype != object and array.size:
        # Writable, as a view of shared memory is, and the sender's array is not touched.
        before = array.tolist()
        back.reshape(-1)[0] = back.reshape(-1)[-1]
        assert array.tolist() == before
    del back
    segments.close()


def test_bytes_elements_keep_triton_layout() -> None:
    array = np.array([b"ab", b"c"], dtype=object)
    data = serialize_bytes(array)
    assert data == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c"
    assert deserialize_bytes(data, (2,)).tolist() == [b"ab", b"c"]


def test_unsupported_types_are_refused(arena: Arena) -> None:
    with pytest.raises(TypeError, match="unsupported data type"):
        put_tensor(arena, "T", np.array([1 + 2j]))


def test_frames_split_across_reads() -> None:
    data = encode({"op": "a", "n": 1}) + encode({"op": "b", "payload": "x" * 1000})
    reader = FrameReader()
    got = []
    for i in range(0, len(data), 7):
        got += reader.feed(data[i : i + 7])
    assert [m["op"] for m in got] == ["a", "b"]


def test_segments_of_a_server_that_is_gone_are_swept() -> None:
    from modelhost.backends.python import ipc

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(gone.stdout)
    prefix = f"mh_sweep_test_{os.getpid()}_"
    names = {
        "dead": f"{prefix}{dead_pid}_1_p_{dead_pid}_0",
        "ours": f"{prefix}{os.getpid()}_1_p_{os.getpid()}_0",
        "alive": f"{prefix}1_1_p_1_0",  # pid 1 is always alive
    }
    for name in names.values():
        Path(ipc.SHM_DIR, name).write_bytes(b"x")
    try:
        assert ipc.sweep_stale_segments(prefix) == [names["dead"]]
        assert sorted(n for n in os.listdir(ipc.SHM_DIR) if n.startswith(prefix)) == sorted(
            [names["ours"], names["alive"]]
        )
    finally:
        for name in names.values():
            Path(ipc.SHM_DIR, name).unlink(missing_ok=True)
