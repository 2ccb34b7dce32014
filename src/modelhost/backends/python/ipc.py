"""How the server and a python model's stub process talk: framed messages on a socket, tensors in shared memory.

Messages are small dicts of plain values (marshal: several times faster than pickle, and it loads no classes),
each framed by its 4-byte length, on a Unix socket pair. Only small tensors (up to `INLINE_BYTES`) go through the
socket, inside the message. The sender copies a larger one into shared memory it owns (an `Arena` of segments in
/dev/shm) and sends a `TensorRef` (name, datatype, shape, segment, offset, size); the receiver maps the segment and
reads the tensor in place. The receiver tells the sender when a block may be reused (`free` lists that ride on
later messages), so each side only ever allocates and frees in its own arena: no cross-process allocator, no locks
shared between processes.

This module is imported by the stub process too: numpy, the standard library and modelhost.datatypes only.
"""

from __future__ import annotations

import contextlib
import marshal
import mmap
import os
import socket
import struct
import threading
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from modelhost.datatypes import WIRE_TO_NUMPY

_FRAME = struct.Struct("<I")
_LEN = struct.Struct("<I")
ALIGN = 64  # every block starts on a cache line
SMALL_BLOCK = 64 * 1024  # blocks up to this size are kept by size for reuse
# The size class of a small block of n cache lines (index n - 1): the next power of two.
_SMALL_SIZES = [1 << max(6, (n * 64 - 1).bit_length()) for n in range(1, SMALL_BLOCK // 64 + 1)]
SHM_DIR = "/dev/shm"
RECEIVE_BUFFER = 1 << 20  # what the stub reads at most in one system call

# KServe datatype <-> numpy dtype (BYTES: object arrays of bytes, BF16: raw uint16 words).
DTYPES = WIRE_TO_NUMPY
_DATATYPE_OF: dict[np.dtype[Any], str] = {
    dtype: name for name, dtype in DTYPES.items() if name not in ("BF16", "BYTES")
}


def datatype_of(array: npt.NDArray[Any]) -> str | None:
    dtype = array.dtype
    found = _DATATYPE_OF.get(dtype)
    if found is not None:
        return found
    if dtype == np.object_ or dtype.kind in ("S", "U"):
        return "BYTES"
    return None


# -- BYTES elements: Triton's layout, a 4-byte little-endian length before each element -----------------------


def serialize_bytes(array: npt.NDArray[Any]) -> bytes:
    parts: list[bytes] = []
    for item in array.ravel():
        if isinstance(item, bytes):
            data = item
        elif isinstance(item, str):
            data = item.encode("utf-8")
        elif isinstance(item, np.bytes_ | bytearray | memoryview):
            data = bytes(item)
        else:
            data = str(item).encode("utf-8")
        parts.append(_LEN.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def deserialize_bytes(buffer: bytes | memoryview, shape: tuple[int, ...]) -> npt.NDArray[Any]:
    data = bytes(buffer)
    items: list[bytes] = []
    offset = 0
    while offset < len(data):
        start = offset + 4
        offset = start + _LEN.unpack_from(data, offset)[0]
        items.append(data[start:offset])
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(shape)


# -- shared memory ---------------------------------------------------------------------------------------------


class Segment:
    """One shared-memory file, mapped. The creator unlinks it; the other side only maps it."""

    def __init__(self, name: str, size: int, create: bool) -> None:
        self.name = name
        self.size = size
        path = os.path.join(SHM_DIR, name)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            else:
                self.size = os.fstat(fd).st_size
            self.map = mmap.mmap(fd, self.size)
        finally:
            os.close(fd)
        self.view = memoryview(self.map)

    def unlink(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(SHM_DIR, self.name))

    def close(self) -> None:
        # Arrays may still view it: then the mapping goes when the last of them does.
        with contextlib.suppress(BufferError):
            self.view.release()
            self.map.close()


def sweep_stale_segments(prefix: str) -> list[str]:
    """Remove the shared memory a killed server left behind: segments named `<prefix><server pid>_...` whose
    server process is gone (a SIGKILL or a crash skips the cleanup at exit). Returns the names removed."""
    removed: list[str] = []
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(prefix):
            continue
        pid_text = name[len(prefix) :].split("_", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or _alive(int(pid_text)):
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(SHM_DIR, name))
            removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


class Arena:
    """Shared memory one side allocates blocks from (first fit over a free list per segment, blocks coalesced
    when freed); new segments are added when a block does not fit, each at least `growth` bytes."""

    def __init__(self, prefix: str, default_size: int, growth: int) -> None:
        self.prefix = prefix
        self.growth = max(growth, ALIGN)
        self._default_size = max(default_size, ALIGN)
        self._segments: dict[str, Segment] = {}
        self._free: dict[str, list[tuple[int, int]]] = {}  # segment -> sorted (offset, size) free blocks
        self._used: dict[tuple[str, int], int] = {}  # (segment, offset) -> size
        self._small: dict[int, list[tuple[str, int]]] = {}  # size -> freed small blocks
        self._lock = threading.Lock()
        self._count = 0

    def _add_segment(self, at_least: int) -> str:
        size = self._default_size if not self._segments else self.growth
        size = max(size, _round_up(at_least, self.growth))
        name = f"{self.prefix}{os.getpid()}_{self._count}"
        self._count += 1
        self._segments[name] = Segment(name, size, create=True)
        self._free[name] = [(0, size)]
        return name

    def alloc(self, nbytes: int) -> tuple[str, int]:
        size = _round_up(max(nbytes, 1), ALIGN)
        if size <= SMALL_BLOCK:
            # Small blocks (most tensors of most requests) come in power-of-two sizes and are kept for reuse
            # on a list per size when freed: O(1) both ways, no search and no merging.
            size = _SMALL_SIZES[(size - 1) // ALIGN]
            with self._lock:
                spare = self._small.get(size)
                if spare:
                    block = spare.pop()
                    self._used[block] = size
                    return block
                return self._alloc_locked(size)
        with self._lock:
            return self._alloc_locked(size)

    def _alloc_locked(self, size: int) -> tuple[str, int]:
        for name, blocks in self._free.items():
            for i, (offset, free) in enumerate(blocks):
                if free >= size:
                    if free == size:
                        del blocks[i]
                    else:
                        blocks[i] = (offset + size, free - size)
                    self._used[(name, offset)] = size
                    return name, offset
        name = self._add_segment(size)
        blocks = self._free[name]
        offset, free = blocks[0]
        if free == size:
            blocks.pop(0)
        else:
            blocks[0] = (offset + size, free - size)
        self._used[(name, offset)] = size
        return name, offset

    def free(self, name: str, offset: int) -> None:
        with self._lock:
            size = self._used.pop((name, offset), None)
            if size is None:
                return  # freed twice, or a block of a segment already gone: nothing to do
            if size <= SMALL_BLOCK:
                self._small.setdefault(size, []).append((name, offset))
                return
            blocks = self._free[name]
            blocks.append((offset, size))
            blocks.sort()
            merged: list[tuple[int, int]] = []
            for start, length in blocks:
                if merged and merged[-1][0] + merged[-1][1] == start:
                    merged[-1] = (merged[-1][0], merged[-1][1] + length)
                else:
                    merged.append((start, length))
            self._free[name] = merged

    def buffer(self, name: str, offset: int, nbytes: int) -> memoryview:
        return self._segments[name].view[offset : offset + nbytes]

    def in_use(self) -> int:
        with self._lock:
            return sum(self._used.values())

    def close(self) -> None:
        with self._lock:
            for segment in self._segments.values():
                segment.unlink()
                segment.close()
            self._segments.clear()
            self._small.clear()
            self._free.clear()
            self._used.clear()


class SegmentMap:
    """The other side's segments, mapped on first use."""

    def __init__(self) -> None:
        self._segments: dict[str, Segment] = {}
        self._lock = threading.Lock()

    def buffer(self, name: str, offset: int, nbytes: int) -> memoryview:
        segment = self._segments.get(name)
        if segment is None:
            with self._lock:
                segment = self._segments.get(name)
                if segment is None:
                    segment = Segment(name, 0, create=False)
                    self._segments[name] = segment
        return segment.view[offset : offset + nbytes]

    def close(self) -> None:
        with self._lock:
            for segment in self._segments.values():
                segment.close()
            self._segments.clear()


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


# -- tensors across the boundary -------------------------------------------------------------------------------


class TensorRef(NamedTuple):
    """A tensor in the sender's shared memory, or a small one in the message itself (`segment` then holds its
    bytes, and `offset` is INLINE). In messages it travels as a plain tuple (`put_tensor` gives one); `as_refs`
    names the fields again on the receiving side."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    segment: str | bytes
    offset: int
    nbytes: int


# TensorRef as a plain tuple, the form marshal carries.
RawRef = tuple[str, str, tuple[int, ...], str | bytes, int, int]

# Tensors up to this many bytes travel in the message: a block of shared memory costs an allocation, a free list
# entry back and a second mapping lookup, more than copying a small tensor twice (benchmarks/README.md, issue 33).
INLINE_BYTES = 1024
INLINE = -1  # the offset of a tensor carried in the message


def as_refs(raw: Any) -> list[TensorRef]:
    return [TensorRef._make(r) for r in raw or ()]


def shared_blocks(refs: list[TensorRef]) -> list[tuple[str, int]]:
    """The blocks of shared memory the tensors are in, for the sender to free (a tensor in the message has none)."""
    return [(segment, ref.offset) for ref in refs if isinstance(segment := ref.segment, str)]


def put_tensor(arena: Arena, name: str, array: npt.NDArray[Any], datatype: str | None = None) -> RawRef:
    """Copy a tensor into the arena, or into the message when it is small (one copy: no pickling of the data)."""
    datatype = datatype or datatype_of(array)
    if datatype is None:
        raise TypeError(f"tensor '{name}' has an unsupported data type {array.dtype}")
    if datatype == "BYTES":
        data = serialize_bytes(array)
        if len(data) <= INLINE_BYTES:
            return (name, datatype, tuple(array.shape), data, INLINE, len(data))
        segment, offset = arena.alloc(len(data))
        arena.buffer(segment, offset, len(data))[:] = data
        return (name, datatype, tuple(array.shape), segment, offset, len(data))
    source = array if array.flags.c_contiguous else np.ascontiguousarray(array)
    nbytes = source.nbytes
    if nbytes <= INLINE_BYTES:
        return (name, datatype, array.shape, source.tobytes(), INLINE, nbytes)
    segment, offset = arena.alloc(nbytes)
    # Bytes onto bytes: a quarter of the cost of a numpy assignment through a view.
    arena.buffer(segment, offset, nbytes)[:] = source.data.cast("B")
    return (name, datatype, array.shape, segment, offset, nbytes)


def view_tensor(segments: SegmentMap, ref: TensorRef) -> npt.NDArray[Any]:
    """The tensor in place (BYTES: decoded into a new object array). One carried in the message is given in
    memory of its own, writable as a tensor in shared memory is."""
    segment = ref.segment
    if ref.offset == INLINE:
        assert isinstance(segment, bytes)
        if ref.datatype == "BYTES":
            return deserialize_bytes(segment, ref.shape)
        return np.frombuffer(bytearray(segment), dtype=DTYPES[ref.datatype]).reshape(ref.shape)
    assert isinstance(segment, str)
    buffer = segments.buffer(segment, ref.offset, ref.nbytes)
    if ref.datatype == "BYTES":
        return deserialize_bytes(buffer, ref.shape)
    return np.frombuffer(buffer, dtype=DTYPES[ref.datatype]).reshape(ref.shape)


def read_tensor(segments: SegmentMap, ref: TensorRef) -> npt.NDArray[Any]:
    """The tensor in memory of its own, for a receiver that keeps it after the sender's block is freed: copied
    out of shared memory; one carried in the message, or BYTES (decoded into a new object array), as it is."""
    array = view_tensor(segments, ref)
    return array if ref.offset == INLINE or ref.datatype == "BYTES" else array.copy()


# -- framing ---------------------------------------------------------------------------------------------------


def encode(message: dict[str, Any]) -> bytes:
    body = marshal.dumps(message)
    return _FRAME.pack(len(body)) + body


# marshal's type code of a dict, the first byte of every message (with marshal's reference flag, 0x80, or not).
_DICT = ord("{")


class FrameReader:
    """Splits a byte stream into messages. A frame whose top-level value is not a dict is refused before marshal
    reads it: garbage on the channel starting with a tuple of two billion items would make marshal allocate them
    first. (Only the top level is checked: the channel joins the server to its own stub processes.)"""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes | memoryview) -> list[dict[str, Any]]:
        self._buffer += data
        messages: list[dict[str, Any]] = []
        buffer = self._buffer
        offset = 0
        while len(buffer) - offset >= 4:
            (length,) = _FRAME.unpack_from(buffer, offset)
            end = offset + 4 + length
            if end > len(buffer):
                break
            if length == 0 or buffer[offset + 4] & 0x7F != _DICT:
                raise ValueError("a frame of the python backend's channel holds no message")
            messages.append(marshal.loads(buffer[offset + 4 : end]))
            offset = end
        if offset:
            del buffer[:offset]
        return messages


class BlockingChannel:
    """The stub's end: blocking sends from any thread (one at a time), and reads by its main thread."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._send_lock = threading.Lock()
        self._reader = FrameReader()
        # One buffer for every read: `recv(1 << 20)` allocates (and maps) a fresh megabyte per call, which cost
        # about 25 us a read, two thirds of an identity model's stub under load (benchmarks/README.md).
        self._received = bytearray(RECEIVE_BUFFER)
        self._received_view = memoryview(self._received)

    def send(self, message: dict[str, Any]) -> None:
        data = encode(message)
        with self._send_lock:
            self.sock.sendall(data)

    def receive_once(self) -> list[dict[str, Any]] | None:
        """What one read brings (maybe no whole message yet); None once the other side has closed."""
        size = self.sock.recv_into(self._received)
        if not size:
            return None
        return self._reader.feed(self._received_view[:size])
