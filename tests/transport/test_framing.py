"""The transport's framing, driven directly through a protocol object and a fake transport (no sockets)."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from modelhost.transport.framing import FramedProtocol
from modelhost.transport.messages import (
    UNARY,
    ApiCall,
    FrontendMessage,
    Hello,
    InferCall,
    WireOutput,
    WireTensor,
    WireWindow,
)


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.aborted = False

    def write(self, data: bytes | bytearray) -> None:
        self.written.append(bytes(data))

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True


class Collecting(FramedProtocol[FrontendMessage]):
    def __init__(self) -> None:
        super().__init__(msgspec.msgpack.Decoder(FrontendMessage))
        self.messages: list[FrontendMessage] = []
        self.fake = FakeTransport()
        self.connection_made(self.fake)  # type: ignore[arg-type]

    def received(self, message: FrontendMessage) -> None:
        self.messages.append(message)


def infer_call(call: int, payload: bytes) -> InferCall:
    return InferCall(
        call, UNARY, "m", "", "id", [WireTensor("X", "UINT8", [len(payload)], memoryview(payload))],
        [WireOutput("Y", shm=WireWindow("r", 8, 16))], {"sequence_id": 2**64 - 1}, 0, 0, True, "HTTP", 1, ""
    )  # fmt: skip


async def sent_bytes(*messages: Any) -> bytes:
    """What a protocol writes for these messages: one write, however many messages one loop turn queues."""
    sender = Collecting()
    for message in messages:
        sender.send(message)
    assert sender.fake.written == []  # nothing leaves before the loop turns
    await asyncio.sleep(0)
    assert len(sender.fake.written) == 1
    return sender.fake.written[0]


def test_frames_queued_in_one_loop_turn_leave_in_one_write() -> None:
    stream = asyncio.run(sent_bytes(Hello(0, 1), infer_call(1, b"abc"), infer_call(2, b"")))
    receiver = Collecting()
    receiver.data_received(stream)
    assert [type(m) for m in receiver.messages] == [Hello, InferCall, InferCall]
    first = receiver.messages[1]
    assert isinstance(first, InferCall)
    assert bytes(first.inputs[0].data) == b"abc"
    assert first.parameters == {"sequence_id": 2**64 - 1}
    assert first.outputs[0].shm == WireWindow("r", 8, 16)


@pytest.mark.parametrize("chunk", [1, 3, 7, 1000])
def test_frames_split_anywhere_across_reads_arrive_whole(chunk: int) -> None:
    payloads = [bytes(range(256)) * 5, b"", b"x" * 70_000]
    stream = asyncio.run(sent_bytes(*(infer_call(i, p) for i, p in enumerate(payloads))))
    receiver = Collecting()
    for start in range(0, len(stream), chunk):
        receiver.data_received(stream[start : start + chunk])
    assert [bytes(m.inputs[0].data) for m in receiver.messages if isinstance(m, InferCall)] == payloads
    assert receiver._in == bytearray()


def test_tensor_bytes_of_a_whole_frame_are_views_of_the_received_buffer() -> None:
    stream = asyncio.run(sent_bytes(infer_call(1, b"\x01" * 4096)))
    receiver = Collecting()
    receiver.data_received(stream)
    message = receiver.messages[0]
    assert isinstance(message, InferCall)
    assert message.inputs[0].data.obj is stream  # no copy


def test_an_undecodable_frame_closes_the_link() -> None:
    receiver = Collecting()
    garbage = b"\xc1\xc1\xc1"
    receiver.data_received(len(garbage).to_bytes(4, "little") + garbage)
    assert receiver.fake.aborted
    assert receiver.messages == []


def test_an_engine_call_keeps_its_arguments() -> None:
    call = ApiCall(7, "load_model", ["m", {"config": "{}"}], {"files_base64": True})
    receiver = Collecting()
    receiver.data_received(asyncio.run(sent_bytes(call)))
    (message,) = receiver.messages
    assert isinstance(message, ApiCall)
    assert (message.call, message.method, message.args, message.kwargs) == (
        7,
        "load_model",
        ["m", {"config": "{}"}],
        {"files_base64": True},
    )
