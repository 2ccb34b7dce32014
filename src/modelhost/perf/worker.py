"""Load-generator processes: each runs its own event loop and sends prebuilt requests.

HTTP: raw HTTP/1.1 keep-alive connections driven by protocol callbacks (no coroutine per request): in
concurrency mode each connection sends its next request from the callback that completes the previous
answer. gRPC: grpc.aio with the serialized request passed as bytes and the answer left unparsed; with
`--streaming`, one ModelStreamInfer stream per request in flight, a request done at its final response.
Sequence models: each connection / stream runs whole sequences (START on the first request, END on the last)
with sequence ids of its own (the ids of a process are those equal to its index modulo the process count, and
no two slots of a process hold one at once); stopping a level ends every open sequence.

The parent talks to a worker over a pipe, with tuples:

    ("concurrency", n)     keep n requests in flight (closed loop)        -> ("ok",) | ("error", msg)
    ("rate", r, dist, seed) send r requests/s, constant or poisson (open)  -> ("ok",) | ("error", msg)
    ("stop",)              send nothing new, wait for answers in flight   -> ("ok",)
    ("collect", t0, t1)    requests answered in [t0, t1) (time.monotonic_ns, the same clock in every process)
                           -> ("window", starts, ends, send_ns, recv_ns, timed, errors, first_error,
                               firsts, counts)  (firsts/counts: streaming only, first-response times and
                               the number of responses of each request)
    ("exit",)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from array import array
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, cast

import numpy as np

from modelhost.perf.bodies import grpc_sequence_id, with_sequence_id

MAX_RATE_CONNECTIONS = 1024


@dataclass(frozen=True, slots=True)
class SequenceSpec:
    """How the requests of sequences are made: per data stream, per entry, a prebuilt request for each of the
    flags start/middle/end/start+end (index start * 2 + end), with the offset of the id field (HTTP) or -1
    (gRPC: the id's parameter is appended)."""

    templates: list[list[list[tuple[bytes, int]]]]
    length: int
    variation_pct: float
    id_start: int
    id_end: int  # excluded


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    protocol: str  # "http" | "grpc"
    host: str
    port: int
    requests: list[bytes]  # HTTP: whole requests (head + body); gRPC: serialized ModelInferRequest
    grpc_method: str = ""
    sequence: SequenceSpec | None = None
    streaming: bool = False  # gRPC ModelStreamInfer (grpc_method is then the stream's)
    decoupled: bool = False  # streaming: a request is done at its response marked triton_final_response
    process_index: int = 0
    process_count: int = 1


class IdAllocator:
    """The sequence ids of one process: start + index, start + index + count, ... below end, wrapping around;
    an id is handed out again only once released."""

    def __init__(self, spec: SequenceSpec, index: int, count: int) -> None:
        self.first = spec.id_start + index
        self.end = spec.id_end
        self.step = count
        self.next = self.first
        self.in_use: set[int] = set()

    @property
    def capacity(self) -> int:
        return max(0, (self.end - self.first + self.step - 1) // self.step)

    def acquire(self) -> int:
        if len(self.in_use) >= self.capacity:
            raise RuntimeError("no free sequence id left in --sequence-id-range")
        while True:
            candidate = self.next
            self.next += self.step
            if self.next >= self.end:
                self.next = self.first
            if candidate not in self.in_use:
                self.in_use.add(candidate)
                return candidate

    def release(self, sequence_id: int) -> None:
        self.in_use.discard(sequence_id)


class SequenceSlot:
    """One connection's / stream's sequences: whole sequences one after the other, each with an id of its own."""

    def __init__(self, spec: SequenceSpec, ids: IdAllocator, rng: random.Random, streams: list[int]) -> None:
        self.spec = spec
        self.ids = ids
        self.rng = rng
        self.streams = streams  # [next stream index], shared by the slots of a process (round-robin)
        self.sequence_id = 0  # 0: none held
        self.stream: list[list[tuple[bytes, int]]] = []
        self.position = 0
        self.remaining = 0

    @property
    def open(self) -> bool:
        """A sequence was started and its END not sent yet."""
        return self.remaining > 0 and self.position > 0

    def _begin(self) -> None:
        self.release()
        self.sequence_id = self.ids.acquire()
        index = self.streams[0]
        self.streams[0] = (index + 1) % len(self.spec.templates)
        self.stream = self.spec.templates[index]
        variation = self.spec.variation_pct / 100
        length = self.spec.length * self.rng.uniform(1 - variation, 1 + variation)
        self.remaining = max(1, round(length))
        self.position = 0

    def _build(self, start: bool, end: bool) -> bytes:
        template, id_offset = self.stream[self.position % len(self.stream)][start * 2 + end]
        self.position += 1
        if id_offset >= 0:
            return with_sequence_id(template, id_offset, self.sequence_id)
        return template + grpc_sequence_id(self.sequence_id)

    def next(self) -> bytes:
        if self.remaining == 0:
            self._begin()
        start = self.position == 0
        self.remaining -= 1
        return self._build(start, self.remaining == 0)

    def close(self) -> bytes | None:
        """The request that ends the open sequence early (END flag), or None."""
        if not self.open:
            return None
        self.remaining = 0
        return self._build(False, True)

    def release(self) -> None:
        """Gives the id back (once the sequence's END was answered)."""
        if self.sequence_id and not self.open:
            self.ids.release(self.sequence_id)
            self.sequence_id = 0


class Recorder:
    """Timestamps of answered requests, and the sums of client send/receive time."""

    def __init__(self, streaming: bool = False) -> None:
        self.streaming = streaming
        self.starts = array("q")
        self.ends = array("q")
        self.firsts = array("q")  # streaming: the time of each request's first response
        self.counts = array("q")  # streaming: the number of responses of each request
        self.send_ns = 0
        self.recv_ns = 0
        self.errors = 0
        self.first_error = ""

    def error(self, message: str) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = message

    def collect(self, t0: int, t1: int) -> tuple[Any, ...]:
        def values(a: array[int]) -> np.ndarray:
            return np.frombuffer(a, dtype=np.int64).copy() if a else np.zeros(0, np.int64)

        starts, ends, firsts, counts = (values(a) for a in (self.starts, self.ends, self.firsts, self.counts))
        inside = (ends >= t0) & (ends < t1)
        later = ends >= t1
        self.starts = array("q", starts[later].tobytes())
        self.ends = array("q", ends[later].tobytes())
        if self.streaming:
            self.firsts = array("q", firsts[later].tobytes())
            self.counts = array("q", counts[later].tobytes())
            firsts, counts = firsts[inside], counts[inside]
        count = int(inside.sum())
        reply = (
            "window",
            starts[inside].tobytes(),
            ends[inside].tobytes(),
            self.send_ns,
            self.recv_ns,
            count,
            self.errors,
            self.first_error,
            firsts.tobytes() if self.streaming else b"",
            counts.tobytes() if self.streaming else b"",
        )
        self.send_ns = self.recv_ns = 0
        self.errors = 0
        self.first_error = ""
        return reply


def _response_end(data: bytes) -> int:
    """The length of the first complete HTTP/1.1 response in data, or -1 while it is incomplete."""
    head_end = data.find(b"\r\n\r\n")
    if head_end < 0:
        return -1
    head = data[:head_end].lower()
    body_start = head_end + 4
    i = head.find(b"\r\ncontent-length:")
    if i >= 0:
        j = head.find(b"\r\n", i + 17)
        length = int(head[i + 17 : j if j >= 0 else len(head)])
        end = body_start + length
        return end if len(data) >= end else -1
    if b"\r\ntransfer-encoding:" in head and b"chunked" in head:
        pos = body_start
        while True:
            line_end = data.find(b"\r\n", pos)
            if line_end < 0:
                return -1
            size = int(data[pos:line_end].split(b";", 1)[0], 16)
            pos = line_end + 2
            if size == 0:
                trailer_end = data.find(b"\r\n", pos)
                while trailer_end > pos:  # trailers, if any, end with an empty line
                    pos = trailer_end + 2
                    trailer_end = data.find(b"\r\n", pos)
                return pos + 2 if trailer_end >= 0 else -1
            pos += size + 2
            if pos > len(data):
                return -1
    return body_start  # no body


class HttpConnection(asyncio.Protocol):
    def __init__(self, worker: HttpWorker) -> None:
        self.worker = worker
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.active = False  # closed loop: send the next request on each answer
        self.busy = False
        self.start = 0
        self.dead = False
        self.record = True  # False for the requests that end open sequences between levels
        self.slot = worker.new_slot()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def send(self) -> None:
        w = self.worker
        if self.slot is not None:
            request = self.slot.next()
        else:
            request = w.requests[w.next_index]
            w.next_index = (w.next_index + 1) % len(w.requests)
        self.write(request)

    def write(self, request: bytes) -> None:
        w = self.worker
        self.busy = True
        self.start = start = time.monotonic_ns()
        assert self.transport is not None
        self.transport.write(request)
        w.recorder.send_ns += time.monotonic_ns() - start

    def data_received(self, data: bytes) -> None:
        arrived = time.monotonic_ns()
        if self.buffer:
            data = self.buffer + data
        end = _response_end(data)
        if end < 0:
            self.buffer = data
            return
        w = self.worker
        rec = w.recorder
        if data[9:12] != b"200":
            rec.error(
                "HTTP " + data[9 : data.find(b"\r\n")].decode(errors="replace") + _error_text(data, end)
            )
        done = time.monotonic_ns()
        if self.record:
            rec.starts.append(self.start)
            rec.ends.append(done)
            rec.recv_ns += done - arrived
        self.buffer = data[end:]
        self.busy = False
        if self.active:
            self.send()
        else:
            w.idle(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.dead = True
        if self.busy or self.active:
            self.worker.recorder.error(f"connection closed by the server ({exc or 'EOF'})")
        self.busy = False
        self.worker.idle(self)


def _error_text(data: bytes, end: int) -> str:
    body = data[data.find(b"\r\n\r\n") + 4 : end]
    text = " ".join(body[:300].decode(errors="replace").split())
    return f": {text}" if text else ""


class Worker:
    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.requests = spec.requests
        self.next_index = 0
        self.recorder = Recorder(spec.streaming)
        self.rate_task: asyncio.Task[None] | None = None
        self.ids: IdAllocator | None = None
        self.rng = random.Random(spec.process_index)
        self.stream_index = [spec.process_index]
        if spec.sequence is not None:
            self.ids = IdAllocator(spec.sequence, spec.process_index, spec.process_count)
            self.stream_index = [spec.process_index % len(spec.sequence.templates)]

    def new_slot(self) -> SequenceSlot | None:
        if self.spec.sequence is None or self.ids is None:
            return None
        return SequenceSlot(self.spec.sequence, self.ids, self.rng, self.stream_index)

    async def set_concurrency(self, n: int) -> None:
        raise NotImplementedError

    async def start_rate(self, rate: float, distribution: str, seed: int) -> None:
        await self.stop()
        self.rate_task = asyncio.get_running_loop().create_task(self._rate_loop(rate, distribution, seed))

    async def _rate_loop(self, rate: float, distribution: str, seed: int) -> None:
        rng = random.Random(seed)
        interval_ns = 1e9 / rate
        next_at = float(time.monotonic_ns())
        while True:
            now = time.monotonic_ns()
            while next_at <= now:
                self.fire()
                next_at += rng.expovariate(1.0) * interval_ns if distribution == "poisson" else interval_ns
            await asyncio.sleep((next_at - time.monotonic_ns()) / 1e9)

    def fire(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        if self.rate_task is not None:
            self.rate_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.rate_task
            self.rate_task = None

    async def close(self) -> None:
        await self.stop()


class HttpWorker(Worker):
    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        self.connections: list[HttpConnection] = []
        self.idle_connections: list[HttpConnection] = []
        self.opening = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self.backlog = 0  # requests due while every connection was busy (rate mode)

    async def _open(self) -> HttpConnection:
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(
            lambda: HttpConnection(self), self.spec.host, self.spec.port
        )
        self.connections.append(protocol)
        return protocol

    async def set_concurrency(self, n: int) -> None:
        await self.stop()
        self.connections = [c for c in self.connections if not c.dead]
        while len(self.connections) < n:
            await self._open()
        for connection in self.connections[:n]:
            connection.active = True
            connection.send()

    def idle(self, connection: HttpConnection) -> None:
        if connection.dead:
            return
        if self.backlog > 0:
            self.backlog -= 1
            connection.send()
        else:
            self.idle_connections.append(connection)

    def fire(self) -> None:
        while self.idle_connections:
            connection = self.idle_connections.pop()
            if not connection.dead:
                connection.send()
                return
        if len(self.connections) + self.opening < MAX_RATE_CONNECTIONS:
            self.opening += 1
            task = asyncio.get_running_loop().create_task(self._open_and_send())
            self.tasks.add(task)  # a reference until it ends (the loop keeps only weak ones)
            task.add_done_callback(self.tasks.discard)
        else:
            self.backlog += 1

    async def _open_and_send(self) -> None:
        try:
            connection = await self._open()
        except OSError as error:
            self.recorder.error(
                f"cannot connect to {self.spec.host}:{self.spec.port}: {error.strerror or error}"
            )
            return
        finally:
            self.opening -= 1
        connection.send()

    async def stop(self) -> None:
        await super().stop()
        self.backlog = 0
        for connection in self.connections:
            connection.active = False
        await self._settle()
        if self.spec.sequence is not None:
            for connection in self.connections:
                request = connection.slot.close() if connection.slot is not None else None
                if request is not None and not connection.dead:
                    connection.record = False
                    connection.write(request)
            await self._settle()
            for connection in self.connections:
                connection.record = True
                if connection.slot is not None:
                    connection.slot.release()
        self.idle_connections = [c for c in self.connections if not c.dead and not c.busy]

    async def _settle(self) -> None:
        deadline = time.monotonic() + 30
        while (self.opening or any(c.busy for c in self.connections)) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    async def close(self) -> None:
        await self.stop()
        for connection in self.connections:
            if connection.transport is not None:
                connection.transport.close()


def final_response(raw: bytes) -> tuple[str, bool, bool]:
    """A ModelStreamInferResponse: its error message, whether it is marked triton_final_response, and whether
    it has outputs (an empty final response is not counted as a response)."""
    from tritonclient.grpc import service_pb2

    response = service_pb2.ModelStreamInferResponse.FromString(raw)
    if response.error_message:
        return response.error_message, True, False
    infer = response.infer_response
    final = infer.parameters.get("triton_final_response")
    return "", bool(final is not None and final.bool_param), len(infer.outputs) > 0


class GrpcStream:
    """One ModelStreamInfer stream carrying one request at a time."""

    def __init__(self, worker: GrpcWorker) -> None:
        self.worker = worker
        self.call = worker.stream_call()
        self.slot = worker.new_slot()
        self.dead = False

    async def request(self, request: bytes, record: bool = True) -> None:
        import grpc

        w = self.worker
        rec = w.recorder
        start = time.monotonic_ns()
        first = 0
        count = 0
        try:
            await self.call.write(request)
            while True:
                raw = await self.call.read()
                now = time.monotonic_ns()
                if raw is grpc.aio.EOF:
                    self.dead = True
                    rec.error("the server closed the stream")
                    break
                first = first or now
                error, final, has_outputs = final_response(raw)
                if error:
                    rec.error(f"gRPC stream: {error}")
                    break
                count += has_outputs or not final
                if final or not w.spec.decoupled:
                    break
        except grpc.aio.AioRpcError as error:
            self.dead = True
            rec.error(f"gRPC {error.code().name}: {error.details()}")
        end = time.monotonic_ns()
        if record:
            rec.starts.append(start)
            rec.ends.append(end)
            rec.firsts.append(first or end)
            rec.counts.append(count)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.call.done_writing()
        self.call.cancel()


class GrpcWorker(Worker):
    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        import grpc.aio

        self.channel = grpc.aio.insecure_channel(
            f"{spec.host}:{spec.port}",
            options=[("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)],
        )
        self.call = self.channel.unary_unary(spec.grpc_method)
        self.stream_call = self.channel.stream_stream(spec.grpc_method)
        self.loops: list[asyncio.Task[None]] = []
        self.in_flight: set[asyncio.Task[None]] = set()
        self.active = False
        self.slots: list[SequenceSlot] = []  # unary requests of sequences: one slot per loop
        self.streams: list[GrpcStream] = []  # streaming: every open stream
        self.idle_streams: list[GrpcStream] = []  # streaming, rate mode

    def _next_request(self) -> bytes:
        request = self.requests[self.next_index]
        self.next_index = (self.next_index + 1) % len(self.requests)
        return request

    async def _one(self, request: bytes, record: bool = True) -> None:
        import grpc

        start = time.monotonic_ns()
        try:
            await self.call(request)
        except grpc.aio.AioRpcError as error:
            self.recorder.error(f"gRPC {error.code().name}: {error.details()}")
        except asyncio.CancelledError:
            raise
        end = time.monotonic_ns()
        if record:
            self.recorder.starts.append(start)
            self.recorder.ends.append(end)

    async def _loop(self, slot: SequenceSlot | None) -> None:
        while self.active:
            await self._one(slot.next() if slot is not None else self._next_request())

    async def _stream_loop(self, stream: GrpcStream) -> None:
        slot = stream.slot
        while self.active and not stream.dead:
            await stream.request(slot.next() if slot is not None else self._next_request())

    async def set_concurrency(self, n: int) -> None:
        await self.stop()
        await self.channel.channel_ready()
        self.active = True
        loop = asyncio.get_running_loop()
        if self.spec.streaming:
            self.streams = [GrpcStream(self) for _ in range(n)]
            self.loops = [loop.create_task(self._stream_loop(stream)) for stream in self.streams]
        else:
            self.slots = [slot for _ in range(n) if (slot := self.new_slot()) is not None]
            self.loops = [
                loop.create_task(self._loop(self.slots[i] if self.slots else None)) for i in range(n)
            ]

    def fire(self) -> None:
        loop = asyncio.get_running_loop()
        if self.spec.streaming:
            task = loop.create_task(self._fire_stream())
        else:
            task = loop.create_task(self._one(self._next_request()))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)

    async def _fire_stream(self) -> None:
        while self.idle_streams and self.idle_streams[-1].dead:
            self.idle_streams.pop()
        if self.idle_streams:
            stream = self.idle_streams.pop()
        else:
            stream = GrpcStream(self)
            self.streams.append(stream)
        await stream.request(self._next_request())
        if not stream.dead:
            self.idle_streams.append(stream)

    async def start_rate(self, rate: float, distribution: str, seed: int) -> None:
        await self.channel.channel_ready()
        await super().start_rate(rate, distribution, seed)

    async def stop(self) -> None:
        await super().stop()
        self.active = False
        pending = [*self.loops, *self.in_flight]
        if pending:
            await asyncio.wait(pending, timeout=30)
        self.loops = []
        # End the sequences left open, unrecorded, then give their ids back.
        closing = [(stream.request, stream.slot) for stream in self.streams if not stream.dead]
        closing += [(self._one, slot) for slot in self.slots]
        ends = [
            send(request, False) for send, slot in closing if slot is not None and (request := slot.close())
        ]
        if ends:
            await asyncio.wait([asyncio.ensure_future(e) for e in ends], timeout=30)
        for _, slot in closing:
            if slot is not None:
                slot.release()
        self.slots = []
        for stream in self.streams:
            await stream.close()
        self.streams = []
        self.idle_streams = []

    async def close(self) -> None:
        await self.stop()
        await self.channel.close()


async def _serve(conn: Connection, spec: WorkerSpec) -> None:
    worker: Worker = HttpWorker(spec) if spec.protocol == "http" else GrpcWorker(spec)
    loop = asyncio.get_running_loop()
    commands: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()

    def readable() -> None:
        try:
            commands.put_nowait(conn.recv())
        except (EOFError, OSError):
            commands.put_nowait(("exit",))
            loop.remove_reader(conn.fileno())

    loop.add_reader(conn.fileno(), readable)
    # The loop made the pipe non-blocking; replies (a window's timestamps) can be larger than the pipe's buffer,
    # and Connection.send expects a blocking descriptor. Reads only happen once the pipe is readable.
    os.set_blocking(conn.fileno(), True)
    try:
        while True:
            command = await commands.get()
            kind = command[0]
            if kind == "exit":
                break
            try:
                if kind == "concurrency":
                    await worker.set_concurrency(int(command[1]))
                    conn.send(("ok",))
                elif kind == "rate":
                    await worker.start_rate(float(command[1]), str(command[2]), int(command[3]))
                    conn.send(("ok",))
                elif kind == "stop":
                    await worker.stop()
                    conn.send(("ok",))
                elif kind == "collect":
                    conn.send(worker.recorder.collect(int(command[1]), int(command[2])))
            except OSError as error:
                conn.send(("error", f"cannot connect to {spec.host}:{spec.port}: {error.strerror or error}"))
            except Exception as error:
                conn.send(("error", f"{type(error).__name__}: {error}"))
    finally:
        with contextlib.suppress(Exception):
            await worker.close()


def worker_main(conn: Connection, spec: WorkerSpec) -> None:
    """The entry point of a load-generator process."""
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
            asyncio.run(_serve(conn, spec))
        else:
            uvloop.run(_serve(conn, spec))
