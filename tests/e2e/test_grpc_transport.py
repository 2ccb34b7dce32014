"""The gRPC server's HTTP/2 layer through real clients: compression, deadlines, unknown methods, GOAWAY on
shutdown, and clients that misbehave on the wire (a raw h2 client on a socket). The same cases, in detail and
without a server, are in tests/frontends/grpc/ (test_dispatch.py, test_answers.py, test_connection.py,
test_keepalive.py)."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import h2.config
import h2.connection
import h2.events
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from e2e.models import add_identity, add_slow
from e2e.server_process import RunningServer, running_server, start_server
from frontends.grpc.peer import request_headers

# Served by the engine in every --frontend-processes mode: run in mode 0 alone (tests/e2e/conftest.py).

INFER = b"/inference.GRPCInferenceService/ModelInfer"


@pytest.fixture(scope="module")
def frontend_processes() -> int:
    """gRPC is served by the engine process in every layout: one mode is enough."""
    return 0


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("grpc_transport")
    add_identity(root, "identity", "FP32", max_batch_size=0)
    add_slow(root)
    return root


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with running_server([repo], tmp_path_factory.mktemp("log") / "server.log") as s:
        yield s


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[grpcclient.InferenceServerClient]:
    c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.close()


def identity(client: grpcclient.InferenceServerClient, array: np.ndarray, **kwargs: object) -> np.ndarray:
    data = grpcclient.InferInput("INPUT0", list(array.shape), "FP32")
    data.set_data_from_numpy(array)
    result = client.infer("identity", [data], **kwargs)  # type: ignore[arg-type]
    out = result.as_numpy("OUTPUT0")
    assert out is not None
    return out


def still_serving(client: grpcclient.InferenceServerClient) -> None:
    array = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(identity(client, array), array)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests(client: grpcclient.InferenceServerClient, algorithm: str) -> None:
    array = np.zeros(100_000, dtype=np.float32)
    np.testing.assert_array_equal(identity(client, array, compression_algorithm=algorithm), array)


def slow(iterations: int) -> list[grpcclient.InferInput]:
    """Inputs of the `slow` model: `iterations` rounds of about a millisecond each."""
    inputs = [grpcclient.InferInput("ITERS", [1], "INT64"), grpcclient.InferInput("X", [256, 256], "FP32")]
    inputs[0].set_data_from_numpy(np.array([iterations], dtype=np.int64))
    inputs[1].set_data_from_numpy(np.full((256, 256), 0.001, dtype=np.float32))
    return inputs


def test_client_timeout_is_deadline_exceeded(client: grpcclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as e:
        client.infer("slow", slow(3000), client_timeout=0.3)
    assert e.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    still_serving(client)


def test_unknown_methods(server: RunningServer, client: grpcclient.InferenceServerClient) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        for path in (
            "/inference.GRPCInferenceService/Nope",
            "/no.Such/Service",
        ):
            with pytest.raises(grpc.RpcError) as e:
                channel.unary_unary(path)(b"", timeout=10)
            assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
            assert e.value.details() == "Method not found!"
    still_serving(client)


def test_a_protobuf_that_does_not_parse(
    server: RunningServer, client: grpcclient.InferenceServerClient
) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel, pytest.raises(grpc.RpcError) as e:
        channel.unary_unary(INFER.decode())(b"\xff\xff\xff", timeout=10)
    assert e.value.code() == grpc.StatusCode.INTERNAL
    assert "failed to parse the request message" in (e.value.details() or "")
    still_serving(client)


def test_a_stream_message_that_does_not_parse(
    server: RunningServer, client: grpcclient.InferenceServerClient
) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
        with pytest.raises(grpc.RpcError) as e:
            list(call(iter([b"\xff\xff\xff"]), timeout=10))
    assert e.value.code() == grpc.StatusCode.INTERNAL
    assert "failed to parse the request message" in (e.value.details() or "")
    still_serving(client)


class RawClient:
    """An HTTP/2 client on a plain socket, for what a well-behaved gRPC client never sends."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.h2.initiate_connection()
        self.flush()
        self.data_received = 0  # DATA bytes of the answers

    def flush(self) -> None:
        self.sock.sendall(self.h2.data_to_send())

    def start(self, path: bytes = INFER) -> int:
        stream_id = self.h2.get_next_available_stream_id()
        self.h2.send_headers(stream_id, request_headers(path))
        return stream_id

    def send_message(self, stream_id: int, data: bytes) -> None:
        """All of `data`, then END_STREAM: frames as large and as many as the server's windows allow. Reading
        meanwhile takes in the server's SETTINGS and WINDOW_UPDATEs, and its DATA, which is never acknowledged:
        to the server this client reads nothing."""
        view = memoryview(data)
        while view:
            room = min(
                self.h2.local_flow_control_window(stream_id), self.h2.max_outbound_frame_size, len(view)
            )
            if room <= 0:
                self.sock.settimeout(5)
                self.take(self.h2.receive_data(self.sock.recv(1 << 20)))
                continue
            self.h2.send_data(stream_id, view[:room].tobytes())
            view = view[room:]
            self.flush()
        self.h2.end_stream(stream_id)
        self.flush()

    def take(self, events: list[h2.events.Event]) -> None:
        self.data_received += sum(len(e.data) for e in events if isinstance(e, h2.events.DataReceived))

    def read_available(self) -> None:
        self.sock.settimeout(0.5)
        try:
            while data := self.sock.recv(1 << 20):
                self.take(self.h2.receive_data(data))
        except TimeoutError:
            pass

    def events_until_closed(self) -> list[h2.events.Event]:
        events: list[h2.events.Event] = []
        while data := self.sock.recv(65536):
            events += self.h2.receive_data(data)
        return events

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture
def raw(server: RunningServer) -> Iterator[RawClient]:
    with RawClient(server.grpc_port) as client:
        yield client


def identity_message(elements: int) -> bytes:
    request = service_pb2.ModelInferRequest(model_name="identity")
    tensor = request.inputs.add(name="INPUT0", datatype="FP32")
    tensor.shape.append(elements)
    request.raw_input_contents.append(np.zeros(elements, dtype=np.float32).tobytes())
    payload = request.SerializeToString()
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


def test_a_client_that_never_reads(
    server: RunningServer, client: grpcclient.InferenceServerClient, raw: RawClient
) -> None:
    """Answers wait for the client's window: the server keeps serving others and its memory stays bounded."""
    message = identity_message(250_000)  # 1 MB in, 1 MB out
    rss_before = _rss(server)
    for _ in range(40):
        stream_id = raw.start()
        raw.send_message(stream_id, message)
    time.sleep(1.0)
    raw.read_available()
    assert (
        0 < raw.data_received <= 65_535
    )  # the client's connection window: never acknowledged, never reopened
    still_serving(client)
    # The client's connection window lets through 64 KiB of answers: the other 40 MB are computed and held,
    # and nothing more.
    assert _rss(server) - rss_before < 150 * 2**20
    still_serving(client)


def _rss(server: RunningServer) -> int:
    for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_stream_reset_mid_message(
    server: RunningServer, client: grpcclient.InferenceServerClient, raw: RawClient
) -> None:
    stream_id = raw.start()
    raw.h2.send_data(stream_id, identity_message(1000)[:2000])
    raw.h2.reset_stream(stream_id)
    raw.flush()
    time.sleep(0.2)
    still_serving(client)


def test_malformed_frames_end_the_connection(
    server: RunningServer, client: grpcclient.InferenceServerClient, raw: RawClient
) -> None:
    raw.sock.sendall(b"\x00\x00\x04\x00\x00\x00\x00\x00\x00abcd")  # DATA on stream 0
    events = raw.events_until_closed()
    assert any(isinstance(e, h2.events.ConnectionTerminated) for e in events)
    still_serving(client)


def test_a_headers_flood_ends_the_connection(
    server: RunningServer, client: grpcclient.InferenceServerClient, raw: RawClient
) -> None:
    # `raw` has not read the server's SETTINGS, so it does not keep to their limit of streams.
    try:
        for _ in range(1100):
            raw.start()
            raw.flush()
        events = raw.events_until_closed()
    except (BrokenPipeError, ConnectionResetError):
        events = []
    # Closed by the server (a timeout here fails the test): with GOAWAY, or reset while the client still wrote.
    assert not events or any(isinstance(e, h2.events.ConnectionTerminated) for e in events)
    still_serving(client)


def test_go_away_on_shutdown(repo: Path, tmp_path: Path) -> None:
    """SIGTERM: the call in flight is answered, then the connection is closed with GOAWAY."""
    server = start_server([repo], tmp_path / "server.log")
    c = grpcclient.InferenceServerClient(server.grpc_url)
    outcome: dict[str, object] = {}
    inputs = slow(1500)

    def slow_request() -> None:
        try:
            outcome["result"] = c.infer("slow", inputs, client_timeout=60).as_numpy("Y")
        except Exception as e:  # reported by the assertion below
            outcome["error"] = e

    worker = threading.Thread(target=slow_request)
    worker.start()
    time.sleep(0.5)
    server.process.send_signal(signal.SIGTERM)
    worker.join(60)
    assert server.process.wait(30) == 0
    assert "error" not in outcome, outcome.get("error")
    with pytest.raises(InferenceServerException):
        c.is_server_live()
    c.close()


def test_tritons_delay_hooks_hold_answers_and_inference_calls(repo: Path, tmp_path: Path) -> None:
    # TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC, which Triton's L0_client_timeout sets to test client
    # timeouts on every non-inference API.
    # TRITONSERVER_DELAY_GRPC_PROCESS holds ModelInfer calls (ms), which L0_request_cancellation cancels meanwhile.
    env = {
        **os.environ,
        "TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC": "2",
        "TRITONSERVER_DELAY_GRPC_PROCESS": "2000",
    }
    with running_server([repo], tmp_path / "server.log", "--log-verbose=1", env=env) as delayed:
        c = grpcclient.InferenceServerClient(delayed.grpc_url)
        for call in (
            c.get_server_metadata,
            c.is_server_live,
            lambda **kw: c.get_model_config("identity", **kw),
        ):
            with pytest.raises(InferenceServerException) as e:
                call(client_timeout=0.1)
            assert e.value.status() == "StatusCode.DEADLINE_EXCEEDED"
        with pytest.raises(InferenceServerException) as e:
            identity(c, np.arange(4, dtype=np.float32), client_timeout=0.1)
        assert e.value.status() == "StatusCode.DEADLINE_EXCEEDED"
        assert c.get_server_metadata(client_timeout=30).name == "triton"
        still_serving(c)
        c.close()
        # Triton's lines for a held call and one cancelled by its deadline, which L0_request_cancellation looks for.
        log = delayed.log()
        assert "Delaying the Process execution by 2000 ms..." in log
        assert "Cancellation notification received for ServerMetadataHandler" in log
        assert "Cancellation notification received for ModelInferHandler" in log
