"""The gRPC load generator: grpc.aio with the serialized request passed as bytes and the answer left unparsed;
with `--streaming`, one ModelStreamInfer stream per request in flight, a request done at its final response."""

from __future__ import annotations

import asyncio
import contextlib
import time

from modelhost.perf.sequences import SequenceSlot
from modelhost.perf.specs import WorkerSpec
from modelhost.perf.worker_base import Worker


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
