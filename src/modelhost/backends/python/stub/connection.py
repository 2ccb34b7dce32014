"""The stub's end of its socket: messages out (with the free lists of the server's blocks we are done with), and in,
read by one thread at a time, its replies handed to the threads waiting for them and the server's calls run by the
main thread, one at a time, in the order sent.

A hand-off to a reader thread cost more than a small model's execute, so there is none: whichever thread waits for
a reply (a BLS result, a metric value; the main thread also for a coroutine or `is_cancelled()`) reads the socket
meanwhile, one at a time (`_reader`), and hands the replies it reads to their waiters.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
import queue
import select
import socket
import threading
from collections.abc import Callable
from typing import Any

from modelhost.backends.python.ipc import Arena, BlockingChannel, SegmentMap
from modelhost.backends.python.pb_utils.errors import TritonModelException

# A call of the server: its message's op -> what runs it on the main thread.
Handler = Callable[[dict[str, Any]], None]


class ServerGone(Exception):
    """The server closed its end (or asked us to finalize): the process ends."""


class Connection:
    def __init__(self, sock: socket.socket, prefix: str, default_size: int, growth: int) -> None:
        self.channel = BlockingChannel(sock)
        self.arena = Arena(prefix, default_size, growth)
        self.segments = SegmentMap()
        # The server's calls by op (Stub fills it in): run on the main thread only.
        self.handlers: dict[str, Handler] = {}
        # Requests the server cancelled (by key), until their execute ends.
        self.cancelled: set[int] = set()
        self._ids = itertools.count(1)
        self._waiting: dict[int, concurrent.futures.Future[dict[str, Any]]] = {}
        self._streams: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._async_waiting: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[dict[str, Any]]]] = {}
        self._frees: list[tuple[str, int]] = []  # the server's blocks we are done with
        # The server's blocks with the inputs of requests still alive (decoupled ones outlive execute), by key.
        self.inputs: dict[int, list[tuple[str, int]]] = {}
        self._frees_lock = threading.Lock()
        self._pid = os.getpid()
        self._busy = False
        self._deferred: list[dict[str, Any]] = []
        # Written when what the reading thread waits for ends otherwise than by a message (a coroutine), so that
        # its select() returns.
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)
        # The socket is read by one thread at a time: the one holding `_reader`. `_read` is notified after every
        # read and when the reader lets go, so that the other waiting threads look at their replies or take over.
        self._reader = threading.Lock()
        self._read = threading.Condition()

    def close(self) -> None:
        """Everything the connection holds, for a stub whose process goes on (tests, benchmarks): the stub's own
        process ends with os._exit once its arena is gone."""
        for sock in (self.channel.sock, self._wake_r, self._wake_w):
            sock.close()
        self.arena.close()
        self.segments.close()

    # -- messages out ------------------------------------------------------------------------------------------

    def next_id(self) -> int:
        """An id unique in this stub: of a message awaiting a reply, or of a metric."""
        return next(self._ids)

    def in_forked_process(self) -> bool:
        return os.getpid() != self._pid

    def check_process(self, what: str) -> None:
        if os.getpid() != self._pid:  # not in_forked_process(): a call less on every message
            # A process the model forked (multiprocessing) shares this process's one connection and shared
            # memory: its messages and replies, and its blocks, would mix with ours. Refused clearly instead.
            raise TritonModelException(
                f"{what} from a process forked by the model (multiprocessing) is not supported by modelhost's "
                "python backend: use threads, or call the server from the model's own process"
            )

    def channel_send(self, message: dict[str, Any]) -> None:
        self.check_process(f"'{message.get('op')}'")
        with self._frees_lock:
            if self._frees:
                message["free"], self._frees = self._frees, []
        self.channel.send(message)

    def release_server_blocks(self, blocks: list[tuple[str, int]]) -> None:
        """The server's blocks we are done with: their free list goes with our next message."""
        with self._frees_lock:
            self._frees.extend(blocks)

    def release_inputs(self, key: int) -> None:
        """The input blocks of request `key` go back to the server (with our next message)."""
        blocks = self.inputs.pop(key, None)
        if blocks:
            with self._frees_lock:
                self._frees.extend(blocks)

    # -- waiting for replies -----------------------------------------------------------------------------------

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send and wait for the server's reply. The main thread reads the reply itself; another thread of the
        model waits while the main thread (idle or waiting too) reads it."""
        waiter_id = next(self._ids)
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        self._waiting[waiter_id] = future
        self.channel_send({**message, "id": waiter_id})
        reply: dict[str, Any] = self.wait(future)
        return reply

    def stream(self, waiter_id: int) -> queue.Queue[dict[str, Any]]:
        """Where the replies to message `waiter_id` go, up to the final one (a decoupled BLS request's)."""
        replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self._streams[waiter_id] = replies
        return replies

    def reply_future(self, waiter_id: int, loop: asyncio.AbstractEventLoop) -> asyncio.Future[dict[str, Any]]:
        """The reply to message `waiter_id`, resolved on `loop` (a coroutine's)."""
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._async_waiting[waiter_id] = (loop, future)
        return future

    def wait(self, future: concurrent.futures.Future[Any]) -> Any:
        # A future another thread completes (a coroutine) wakes the reading thread's select().
        future.add_done_callback(lambda _: self._wake_w.send(b"."))
        self.wait_until(future.done)
        return future.result()

    def wait_until(self, done: Callable[[], bool], timeout: float | None = None) -> None:
        """Wait until `done()` (made true by a reply, or a wake-up), reading the socket meanwhile unless another
        thread does. With `timeout` 0: read what has arrived, if no other thread is reading, and return."""
        while not done():
            if self._reader.acquire(blocking=False):
                try:
                    while not done():
                        self._read_once(timeout)
                        with self._read:
                            self._read.notify_all()
                        if timeout is not None:
                            return
                finally:
                    self._release_reader()
                return
            if timeout is not None:
                return
            with self._read:
                if not done() and self._reader.locked():
                    self._read.wait()

    # -- messages in -------------------------------------------------------------------------------------------

    def _read_once(self, timeout: float | None) -> None:
        """Read what has arrived (or a wake-up) and route it; the caller holds `_reader`. Replies go to their
        waiters; calls of the server wait for the main thread."""
        readable, _, _ = select.select([self.channel.sock, self._wake_r], [], [], timeout)
        if self._wake_r in readable:
            self._wake_r.recv(4096)
        if self.channel.sock in readable:
            messages = self.channel.receive_once()
            if messages is None:
                raise ServerGone
            for message in messages:
                if self._route(message) is not None:
                    self._deferred.append(message)  # a call: the main thread runs it, in order

    def _release_reader(self) -> None:
        with self._read:
            self._reader.release()
            self._read.notify_all()

    def _route(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """Handle what any thread may (free lists, cancellations, replies); return a call of the server."""
        for segment, offset in message.pop("free", ()):
            self.arena.free(segment, offset)
        op = message["op"]
        if op == "free":
            return None  # only its free list, handled above
        if op == "cancel":
            self.cancelled.add(message["key"])
            return None
        if op == "reply":
            self._answer(message)
            return None
        return message

    def _answer(self, message: dict[str, Any]) -> None:
        waiter_id = message["id"]
        asynchronous = self._async_waiting.pop(waiter_id, None)
        if asynchronous is not None:
            loop, future = asynchronous
            loop.call_soon_threadsafe(_resolve, future, message)
            return
        waiter = self._waiting.pop(waiter_id, None)
        if waiter is not None:
            waiter.set_result(message)
            return
        replies = self._streams.get(waiter_id)
        if replies is not None:
            replies.put(message)
            if message.get("final", True):
                del self._streams[waiter_id]

    # -- the main thread ---------------------------------------------------------------------------------------

    def handle(self, message: dict[str, Any]) -> None:
        """Run a call of the server (on the main thread), or keep it for later while another one runs."""
        if self._route(message) is None:
            return
        op = message["op"]
        if self._busy:
            self._deferred.append(message)  # the server sends one call at a time; kept in order all the same
        else:
            self._busy = True
            try:
                self.handlers[op](message)
            finally:
                self._busy = False
            if op == "finalize":
                raise ServerGone

    def serve(self) -> None:
        """One thread reads and runs everything: a hand-off to another thread costs more than a small model."""
        try:
            while True:
                while self._deferred and not self._busy:
                    self.handle(self._deferred.pop(0))
                if not self._reader.acquire(blocking=False):
                    # A thread of the model reads for its replies: it keeps the calls it reads for us.
                    with self._read:
                        if self._reader.locked() and not self._deferred:
                            self._read.wait()
                    continue
                try:
                    if self._deferred:
                        continue
                    # Idle: nothing but the socket can need us (no coroutine of ours is waited for), so a plain
                    # blocking read, one system call per message instead of select() and read.
                    messages = self.channel.receive_once()
                    if messages is None:
                        raise ServerGone
                    calls = [m for m in messages if self._route(m) is not None]
                finally:
                    self._release_reader()
                for message in calls:
                    self.handle(message)
        except ServerGone:
            return


def _resolve(future: asyncio.Future[dict[str, Any]], message: dict[str, Any]) -> None:
    if not future.done():
        future.set_result(message)
