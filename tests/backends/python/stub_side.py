"""A `process.Stub` for the server side's tests, without a process: its socket's other end and the stub's arena
(where its outputs are) are the test's."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from modelhost.backends.python.ipc import Arena, FrameReader
from modelhost.backends.python.process import Stub


class Transport:
    """What the event loop's transport would write to the stub."""

    def __init__(self) -> None:
        self.written = b""
        self.closing = False

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closing

    def messages(self) -> list[dict[str, Any]]:
        return FrameReader().feed(self.written)


@contextmanager
def stub_without_process() -> Iterator[tuple[Stub, Arena]]:
    """A Stub (its transport a `Transport`), and the arena its own outputs are put in."""
    ours, theirs = socket.socketpair()
    prefix = f"mhtest_{os.getpid()}_{id(ours)}_"
    stub = Stub(1, "m_0", prefix, None, ours, Arena(prefix + "p_", 1 << 16, 1 << 16))  # type: ignore[arg-type]
    stub.transport = Transport()  # type: ignore[assignment]
    stub_arena = Arena(prefix + "s_", 1 << 16, 1 << 16)
    try:
        yield stub, stub_arena
    finally:
        for sock in (ours, theirs):
            sock.close()
        stub.segments.close()
        stub.arena.close()
        stub_arena.close()


def written(stub: Stub) -> list[dict[str, Any]]:
    transport = stub.transport
    assert isinstance(transport, Transport)
    return transport.messages()
