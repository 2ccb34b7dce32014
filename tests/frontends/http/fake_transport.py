"""An asyncio transport in memory, for driving the HTTP protocol without a socket (as uvicorn tests its own)."""

from __future__ import annotations


class FakeTransport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self.paused = False

    def write(self, data: bytes) -> None:
        if not self.closed:  # as asyncio's transports, which drop what is written after close()
            self.written += data

    def writelines(self, parts: list[bytes]) -> None:
        for part in parts:
            self.write(part)

    def is_closing(self) -> bool:
        return self.closed

    def can_write_eof(self) -> bool:
        return False  # so a refused connection closes at once (a real one lingers: tests/e2e)

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False
