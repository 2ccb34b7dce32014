"""Clients of the generate extension for end-to-end tests: server-sent events read as a browser's EventSource
reads them, and HTTP/1.1 answers read off a plain socket where a test needs the bytes themselves."""

from __future__ import annotations

import codecs
import json
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import requests

SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model that generates various "
    "number of responses"
)
_LINE_END = re.compile(r"\r\n|\n|\r")


@dataclass(frozen=True)
class Event:
    data: str

    def json(self) -> Any:
        return json.loads(self.data)


def read_events(response: requests.Response) -> Iterator[Event]:
    """The events of a `text/event-stream` answer (asked for with stream=True), each as soon as it is complete.

    The HTML standard's parsing: lines end in CRLF, LF or CR; a blank line dispatches the event; `data` lines join
    with LF; one space after the colon is dropped; comments (`:`) and other fields are ignored; an event the stream
    ends before its blank line is dropped.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    pending = ""
    data: list[str] | None = None
    started = False
    for chunk in response.iter_content(chunk_size=None):
        pending += decoder.decode(chunk)
        if not started and pending:
            pending = pending.removeprefix("\ufeff")
            started = True
        while (end := _LINE_END.search(pending)) is not None:
            if end.group() == "\r" and end.end() == len(pending):
                break  # a CR the next piece may follow with its LF
            line, pending = pending[: end.start()], pending[end.end() :]
            if line == "":
                if data is not None:
                    yield Event("\n".join(data))
                data = None
            elif not line.startswith(":"):
                field, _, value = line.partition(":")
                if field == "data":
                    data = [*(data or []), value.removeprefix(" ")]


@dataclass(frozen=True)
class RawAnswer:
    status: int
    headers: dict[str, str]  # names lower-cased
    body: bytes
    chunks: list[bytes] | None  # the chunks of a chunked answer, as framed on the wire; None otherwise


class RawConnection:
    """One HTTP/1.1 connection on a plain socket: a test sees the framing itself (chunks, the terminator, whether
    the connection stays open for another request) and can hang up in the middle of an answer."""

    def __init__(self, port: int, timeout: float = 10) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buffer = b""

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, method: str, path: str, body: bytes = b"") -> None:
        head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {len(body)}\r\n\r\n"
        self.sock.sendall(head.encode() + body)

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise EOFError(f"the server closed the connection; unread: {self.buffer!r}")
        self.buffer += data

    def read_until(self, marker: bytes) -> bytes:
        """Up to and including `marker`."""
        while (at := self.buffer.find(marker)) < 0:
            self._fill()
        piece, self.buffer = self.buffer[: at + len(marker)], self.buffer[at + len(marker) :]
        return piece

    def read_exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self._fill()
        piece, self.buffer = self.buffer[:size], self.buffer[size:]
        return piece

    def read_head(self) -> tuple[int, dict[str, str]]:
        lines = self.read_until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        return status, headers

    def read_answer(self) -> RawAnswer:
        """One whole answer: a chunked body must end with the terminating chunk and its blank line."""
        status, headers = self.read_head()
        if headers.get("transfer-encoding") != "chunked":
            return RawAnswer(status, headers, self.read_exactly(int(headers["content-length"])), None)
        chunks = []
        while True:
            size = int(self.read_until(b"\r\n")[:-2].split(b";")[0], 16)
            if size == 0:
                assert self.read_exactly(2) == b"\r\n", "the last chunk is not followed by an empty line"
                return RawAnswer(status, headers, b"".join(chunks), chunks)
            chunks.append(self.read_exactly(size))
            assert self.read_exactly(2) == b"\r\n", "a chunk is not followed by CRLF"


def sse_payloads(body: bytes) -> list[Any]:
    """The JSON documents of an event stream's whole body, which must be `data: <json>\\n\\n` events only."""
    assert body.endswith(b"\n\n") or body == b"", body
    events = body.split(b"\n\n")[:-1]
    for event in events:
        assert event.startswith(b"data: ") and b"\n" not in event, event
    return [json.loads(event[len(b"data: ") :]) for event in events]
