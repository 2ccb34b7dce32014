"""gRPC under fuzzing: ModelInferRequest messages of every shape (unary and in a stream) against the real engine,
and HTTP/2 frames and bytes of every kind against a connection. Whatever is sent: a status a client can act on
(never UNKNOWN or INTERNAL but for what the protocol says is malformed), an answer for every streamed request,
no traceback or error in the log, no hang."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)
from hypothesis import given
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from e2e.models import add_identity, copy_examples
from frontends.grpc.peer import MemoryTransport
from fuzz.harness import InProcessServer
from modelhost.frontends.grpc.calls import AbortError
from modelhost.frontends.grpc.calls import CallContext as GrpcCall
from modelhost.frontends.grpc.connection import GrpcConnection
from modelhost.frontends.grpc.server import GrpcServer
from modelhost.options.limits import GrpcLimits

# The statuses a malformed request may get; UNKNOWN and INTERNAL would be faults of the server's.
FAULTS = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    repo = tmp_path_factory.mktemp("fuzz_grpc_repo")
    copy_examples(repo, "simple")
    add_identity(repo, "identity_bytes", "BYTES")
    add_identity(repo, "nobatch", "INT8", max_batch_size=0, dims="[ 2, 3 ]")
    running = InProcessServer(repo)
    yield running
    running.close()


DATATYPES = ["INT32", "FP32", "BYTES", "INT8", "FP16", "BF16", "BOOL", "UINT64", "fp32", "XYZ", ""]
CONTENTS = {
    "int_contents": st.lists(st.integers(-(2**31), 2**31 - 1), max_size=40),
    "int64_contents": st.lists(st.integers(-(2**63), 2**63 - 1), max_size=20),
    "uint_contents": st.lists(st.integers(0, 2**32 - 1), max_size=20),
    "fp32_contents": st.lists(st.floats(width=32), max_size=40),
    "bool_contents": st.lists(st.booleans(), max_size=20),
    "bytes_contents": st.lists(st.binary(max_size=10), max_size=10),
}
parameter_values = st.one_of(
    st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=10), st.floats()
)


def set_parameter(target: Any, key: str, value: Any) -> None:
    kind = {bool: "bool_param", int: "int64_param", str: "string_param", float: "double_param"}[type(value)]
    setattr(target[key], kind, value)


@st.composite
def infer_requests(draw: st.DrawFn) -> Any:
    message = service_pb2.ModelInferRequest(
        model_name=draw(st.sampled_from(["simple", "identity_bytes", "nobatch", "missing", ""])),
        model_version=draw(st.sampled_from(["", "1", "2", "-1", "x", "99999999999999999999"])),
        id=draw(st.text(max_size=8)),
    )
    raw = draw(st.booleans())
    for _ in range(draw(st.integers(0, 3))):
        tensor = message.inputs.add(
            name=draw(st.sampled_from(["INPUT0", "INPUT1", "", "other"])),
            datatype=draw(st.sampled_from(DATATYPES)),
            shape=draw(
                st.lists(st.one_of(st.integers(0, 20), st.integers(-(2**63), 2**63 - 1)), max_size=70)
            ),
        )
        if not raw:
            field = draw(st.sampled_from(sorted(CONTENTS)))
            getattr(tensor.contents, field).extend(draw(CONTENTS[field]))
        for key, value in draw(
            st.dictionaries(
                st.sampled_from(
                    [
                        "binary_data_size",
                        "shared_memory_region",
                        "shared_memory_byte_size",
                        "shared_memory_offset",
                        "x",
                    ]
                ),
                parameter_values,
                max_size=2,
            )
        ).items():
            set_parameter(tensor.parameters, key, value)
    if raw:
        message.raw_input_contents.extend(draw(st.lists(st.binary(max_size=100), max_size=4)))
    for _ in range(draw(st.integers(0, 2))):
        output = message.outputs.add(name=draw(st.sampled_from(["OUTPUT0", "OUTPUT1", "nope"])))
        for key, value in draw(
            st.dictionaries(
                st.sampled_from(["classification", "binary_data", "x"]), parameter_values, max_size=2
            )
        ).items():
            set_parameter(output.parameters, key, value)
    for key, value in draw(
        st.dictionaries(
            st.sampled_from(["sequence_id", "priority", "timeout", "triton_x", "x", "sequence_start"]),
            parameter_values,
            max_size=3,
        )
    ).items():
        set_parameter(message.parameters, key, value)
    return message


def no_fault_logged(server: InProcessServer) -> None:
    errors = server.errors.take()
    assert not errors, errors


@given(infer_requests())
def test_any_infer_request_gets_an_answer_or_a_status_a_client_can_act_on(
    server: InProcessServer, message: Any
) -> None:
    async def call() -> None:
        try:
            await server.grpc.ModelInfer(message, GrpcCall([]))
        except AbortError as e:
            assert e.code not in FAULTS, e.message

    server.run(call())
    no_fault_logged(server)


@given(st.lists(infer_requests(), min_size=1, max_size=5))
def test_every_streamed_request_is_answered(server: InProcessServer, messages: list[Any]) -> None:
    async def stream() -> int:
        async def requests() -> AsyncIterator[Any]:
            for message in messages:
                yield message

        answers = 0
        async for _ in server.grpc.ModelStreamInfer(requests(), GrpcCall([])):
            answers += 1
        return answers

    # One answer (or error message) per request: a stream that loses one leaves its client waiting for ever.
    assert server.run(stream()) == len(messages)
    no_fault_logged(server)


# -- HTTP/2 frames ---------------------------------------------------------------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
stream_ids = st.sampled_from([0, 1, 3, 5, 2, 2**31 - 1])


def _frame(draw: st.DrawFn, kind: str, sid: int) -> Any:
    if kind == "headers":
        frame: Any = HeadersFrame(sid)
        frame.data = draw(st.binary(max_size=60))
        frame.flags.update(
            draw(st.sets(st.sampled_from(["END_STREAM", "END_HEADERS", "PADDED", "PRIORITY"])))
        )
    elif kind == "data":
        frame = DataFrame(sid, data=draw(st.binary(max_size=100)))
        frame.flags.update(draw(st.sets(st.sampled_from(["END_STREAM"]))))
    elif kind == "settings":
        frame = SettingsFrame(0, settings={draw(st.integers(0, 10)): draw(st.integers(0, 2**32 - 1))})
        if draw(st.booleans()):
            frame.flags.add("ACK")
            frame.settings = {}
    elif kind == "window":
        frame = WindowUpdateFrame(sid, window_increment=draw(st.integers(0, 2**31 - 1)))
    elif kind == "rst":
        frame = RstStreamFrame(sid, error_code=draw(st.integers(0, 20)))
    elif kind == "ping":
        frame = PingFrame(0, opaque_data=draw(st.binary(min_size=8, max_size=8)))
    elif kind == "goaway":
        frame = GoAwayFrame(0, last_stream_id=draw(st.integers(0, 100)), error_code=draw(st.integers(0, 20)))
    elif kind == "priority":
        frame = PriorityFrame(
            sid, depends_on=draw(st.integers(0, 10)), stream_weight=draw(st.integers(0, 255))
        )
    else:
        frame = ContinuationFrame(sid, data=draw(st.binary(max_size=30)))
    return frame


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    kind = draw(
        st.sampled_from(
            [
                "headers",
                "data",
                "settings",
                "window",
                "rst",
                "ping",
                "goaway",
                "priority",
                "continuation",
                "bytes",
            ]
        )
    )
    if kind != "bytes":
        try:
            return bytes(_frame(draw, kind, draw(stream_ids)).serialize())
        except Exception:  # a frame hyperframe refuses to make: bytes instead
            pass
    return bytes(draw(st.binary(max_size=60)))


def good_call_headers() -> bytes:
    """A valid HEADERS frame opening a ServerLive call on stream 1 (HPACK literals, no indexing)."""

    def literal(name: bytes, value: bytes) -> bytes:
        return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value

    block = b"".join(
        literal(n, v)
        for n, v in (
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", b"/inference.GRPCInferenceService/ServerLive"),
            (b":authority", b"x"),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        )
    )
    frame = HeadersFrame(1, data=block)
    frame.flags.add("END_HEADERS")
    return bytes(frame.serialize())


@given(st.lists(frames(), max_size=8), st.booleans())
def test_any_http2_frames_leave_the_server_standing(
    server: InProcessServer, sequence: list[bytes], opened: bool
) -> None:
    grpc_server = GrpcServer(server.engine, GrpcLimits(max_message_size=1 << 20))

    async def connection() -> None:
        transport = MemoryTransport()
        protocol = GrpcConnection(grpc_server.methods, grpc_server.limits, set())
        transport.protocol = protocol
        protocol.connection_made(transport)  # type: ignore[arg-type]
        protocol.data_received(PREFACE + bytes(SettingsFrame(0).serialize()))
        if opened:
            protocol.data_received(good_call_headers())
        for data in sequence:
            if transport.closed:
                break
            protocol.data_received(data)
        for _ in range(20):
            await asyncio.sleep(0)
        for call in list(protocol.calls.values()):  # what is still running is cancelled with the connection
            if call.task is not None:
                call.task.cancel()
        if not transport.closed:
            transport.close()
        await asyncio.sleep(0)

    server.run(connection())
    no_fault_logged(server)
