"""--frontend-processes=N: the process layout, its faults and its limits, through real clients.

Every other end-to-end module already runs against two frontend processes too (the conftest's
`frontend_processes` parameter); this one covers what only the layout has: frontends killed and restarted, the
engine killed, a full frontend buffer, clients that go away, draining on SIGTERM, the shared ports, gRPC streams
on a frontend killed mid-stream, and model reloads while frontends serve.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import json_format, text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from e2e.models import copy_examples
from e2e.server_process import RunningServer, free_ports, running_server, start_server

PYTHON_MODELS = Path(__file__).parent / "python_models"
BUFFER = 200_000  # --frontend-buffer-byte-size of the module's server

# A decoupled model that answers each request from a thread of its own (so that requests stream side by side on
# one instance): IN = [count, delay_ms] gives `count` answers IDX = 0, 1, ..., one each `delay_ms`.
PACED = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def answer(sender, count, delay_ms):
    for i in range(count):
        time.sleep(delay_ms / 1000)
        sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("IDX", np.array([i], dtype=np.int32))]))
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count, delay_ms = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().tolist()
            sender = request.get_response_sender()
            threading.Thread(target=answer, args=(sender, count, delay_ms), daemon=True).start()
        return None
"""
PACED_CONFIG = """
name: "paced"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN", data_type: TYPE_INT32, dims: [ 2 ] } ]
output [ { name: "IDX", data_type: TYPE_INT32, dims: [ 1 ] } ]
"""


@pytest.fixture(scope="module")
def frontend_processes() -> int:
    """This module names its own modes: it runs once, not once per mode."""
    return 2


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("frontends")
    copy_examples(root, "simple")
    shutil.copytree(PYTHON_MODELS / "identity_delay", root / "identity_delay")
    (root / "paced" / "1").mkdir(parents=True)
    (root / "paced" / "1" / "model.py").write_text(PACED)
    (root / "paced" / "config.pbtxt").write_text(PACED_CONFIG)
    return root


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("log") / "server.log"
    with running_server(
        [repo], log, "--frontend-processes=2", f"--frontend-buffer-byte-size={BUFFER}"
    ) as running:
        yield running


def frontend_pids(server: RunningServer) -> list[int]:
    pid = server.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return sorted(
        int(c) for c in children if b"modelhost.frontends.process" in Path(f"/proc/{c}/cmdline").read_bytes()
    )


def wait_for_frontends(server: RunningServer, count: int, timeout: float = 10) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = frontend_pids(server)
        if len(pids) == count and all(_listening(pid, server.http_port) for pid in pids):
            return pids
        time.sleep(0.02)
    raise AssertionError(f"expected {count} listening frontends, have {frontend_pids(server)}")


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _tcp_rows() -> list[list[str]]:
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            rows += [line.split() for line in f.readlines()[1:]]
    return rows


def _listening(pid: int, port: int) -> bool:
    inodes = _socket_inodes(pid)
    return any(
        r[3] == "0A" and int(r[1].rsplit(":", 1)[1], 16) == port and r[9] in inodes for r in _tcp_rows()
    )


def frontend_of(connection: http.client.HTTPConnection, server: RunningServer) -> int:
    """The pid of the frontend process that holds the server side of a client connection."""
    assert connection.sock is not None
    client_port = connection.sock.getsockname()[1]
    for _ in range(100):
        for row in _tcp_rows():
            local_port = int(row[1].rsplit(":", 1)[1], 16)
            remote_port = int(row[2].rsplit(":", 1)[1], 16)
            if local_port == server.http_port and remote_port == client_port:
                for pid in frontend_pids(server):
                    if row[9] in _socket_inodes(pid):
                        return pid
        time.sleep(0.01)
    raise AssertionError("no frontend holds the connection")


def infer_body(values: int = 4, delay_ms: int = 0) -> bytes:
    return json.dumps(
        {
            "inputs": [{"name": "INPUT0", "shape": [values], "datatype": "FP32", "data": [1.0] * values}],
            "outputs": [{"name": "OUTPUT0"}],
            "parameters": {"delay_ms": delay_ms},
        }
    ).encode()


def post(
    connection: http.client.HTTPConnection, body: bytes, model: str = "identity_delay"
) -> tuple[int, bytes]:
    connection.request("POST", f"/v2/models/{model}/infer", body)
    response = connection.getresponse()
    return response.status, response.read()


def connections_on_two_frontends(server: RunningServer) -> tuple[http.client.HTTPConnection, ...]:
    """Two open connections that the kernel gave to different frontend processes."""
    by_frontend: dict[int, http.client.HTTPConnection] = {}
    spare = []
    for _ in range(64):
        connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
        connection.connect()
        pid = frontend_of(connection, server)
        if pid in by_frontend:
            spare.append(connection)
        else:
            by_frontend[pid] = connection
        if len(by_frontend) == 2:
            break
    for connection in spare:
        connection.close()
    assert len(by_frontend) == 2, "SO_REUSEPORT should spread connections over both frontends"
    return tuple(by_frontend.values())


def stats(server: RunningServer, model: str) -> dict[str, object]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        result: dict[str, object] = client.get_inference_statistics(model)["model_stats"][0][
            "inference_stats"
        ]
        return result
    finally:
        client.close()


def test_two_frontends_share_the_http_port_and_answer(server: RunningServer) -> None:
    pids = wait_for_frontends(server, 2)
    assert all(_listening(pid, server.http_port) for pid in pids)
    assert not _listening(server.process.pid, server.http_port)  # the engine holds no HTTP listener
    first, second = connections_on_two_frontends(server)
    for connection in (first, second):
        status, body = post(connection, infer_body(3))
        assert status == 200, body
        assert json.loads(body)["outputs"][0]["data"] == [1.0, 1.0, 1.0]
        connection.close()


def test_a_killed_frontend_fails_only_its_own_requests_and_comes_back(server: RunningServer) -> None:
    wait_for_frontends(server, 2)
    shm_before = set(os.listdir("/dev/shm"))
    doomed, survivor = connections_on_two_frontends(server)
    doomed_pid = frontend_of(doomed, server)
    with ThreadPoolExecutor(2) as pool:
        lost = pool.submit(post, doomed, infer_body(delay_ms=1500))
        kept = pool.submit(post, survivor, infer_body(delay_ms=1500))
        time.sleep(0.5)  # both requests are in the model now
        os.kill(doomed_pid, signal.SIGKILL)
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            lost.result(timeout=30)
        status, body = kept.result(timeout=30)
    assert status == 200, body
    # New connections are served by the frontend left, and a new frontend comes back (the log says how long the
    # restart took; 2 s is the aim).
    for _ in range(5):
        connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
        assert post(connection, infer_body())[0] == 200
        connection.close()
    pids = wait_for_frontends(server, 2)
    assert doomed_pid not in pids
    # Frontends hold no shared memory: no segment that appeared is theirs (other servers of a parallel test run
    # may add their own meanwhile).
    new_segments = set(os.listdir("/dev/shm")) - shm_before
    frontends = {doomed_pid, *pids}
    assert not [name for name in new_segments if any(f"_{pid}_" in name for pid in frontends)], new_segments
    assert "exited with status -9; restarting it" in server.log()
    survivor.close()
    doomed.close()


def test_a_full_frontend_buffer_answers_503_at_once_and_counts_a_rejection(server: RunningServer) -> None:
    before = stats(server, "identity_delay")["fail"]["count"]  # type: ignore[index]
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    status, body = post(connection, infer_body(values=BUFFER // 4))  # its JSON alone is over the buffer
    assert status == 503
    message = json.loads(body)["error"]
    assert "--frontend-buffer-byte-size" in message and str(BUFFER) in message
    status, body = post(connection, infer_body(3))  # the same connection goes on
    assert status == 200, body
    connection.close()
    assert stats(server, "identity_delay")["fail"]["count"] == before + 1  # type: ignore[index]


def test_a_client_that_goes_away_gives_its_buffer_space_back(server: RunningServer) -> None:
    values = BUFFER * 2 // 5 // 5  # a body of over a third of the buffer, less than a half
    body = infer_body(values=values, delay_ms=800)
    assert BUFFER / 3 < len(body) < BUFFER / 2
    for _ in range(4):  # without the space given back, the third of these would be refused
        connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
        connection.connect()
        connection.request("POST", "/v2/models/identity_delay/infer", body)
        time.sleep(0.2)
        connection.close()  # goes away while the model runs
        time.sleep(1.0)  # the model answers the request of a client that is gone
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    status, answer = post(connection, infer_body(values=values))
    assert status == 200, answer
    connection.close()


def test_sigterm_drains_requests_in_flight_then_exits_zero(repo: Path, tmp_path: Path) -> None:
    server = start_server([repo], tmp_path / "server.log", "--frontend-processes=2")
    pids = wait_for_frontends(server, 2)
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(post, connection, infer_body(delay_ms=1000))
        time.sleep(0.4)
        server.process.send_signal(signal.SIGTERM)
        status, body = answer.result(timeout=30)
    connection.close()
    assert status == 200, body
    assert server.process.wait(30) == 0
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_the_engine_killed_takes_the_frontends_down_and_the_server_exits_nonzero(
    repo: Path, tmp_path: Path
) -> None:
    server = start_server([repo], tmp_path / "server.log", "--frontend-processes=2")
    pids = wait_for_frontends(server, 2)
    os.kill(server.process.pid, signal.SIGKILL)
    assert server.process.wait(10) != 0
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids):
        time.sleep(0.05)
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", server.http_port), timeout=2):
        pass


def test_a_port_in_use_fails_the_start_with_one_clear_message(repo: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        grpc_port, metrics_port = free_ports(2)
        with pytest.raises(RuntimeError, match="exited with 1") as failure:
            start_server(
                [repo],
                tmp_path / "server.log",
                f"--http-port={port}",
                f"--grpc-port={grpc_port}",
                f"--metrics-port={metrics_port}",
                "--frontend-processes=2",
            )
    assert "failed to start the server" in str(failure.value) and "in use" in str(failure.value)


def test_binary_tensors_and_errors_round_trip_through_a_frontend(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a, binary_data=True)
        outputs = [httpclient.InferRequestedOutput(n, binary_data=True) for n in ("OUTPUT0", "OUTPUT1")]
        result = client.infer("simple", inputs, outputs=outputs)
        assert (result.as_numpy("OUTPUT0") == 2 * a).all()
        assert (result.as_numpy("OUTPUT1") == 0).all()
        with pytest.raises(Exception, match="NOPE"):
            client.infer("simple", [httpclient.InferInput("NOPE", [1, 16], "INT32").set_data_from_numpy(a)])
    finally:
        client.close()


def _grpc_peers(server: RunningServer) -> set[tuple[int, int]]:
    """(frontend pid, client port) of every gRPC connection the frontends hold."""
    pids = frontend_pids(server)
    inodes = {pid: _socket_inodes(pid) for pid in pids}
    peers = set()
    for row in _tcp_rows():
        if row[3] != "01" or int(row[1].rsplit(":", 1)[1], 16) != server.grpc_port:  # ESTABLISHED only
            continue
        for pid in pids:
            if row[9] in inodes[pid]:
                peers.add((pid, int(row[2].rsplit(":", 1)[1], 16)))
    return peers


class Stream:
    """One gRPC client with its own connection (a local subchannel pool: tritonclient's channels to one address
    otherwise share one), streaming one long request of the paced model."""

    def __init__(self, server: RunningServer) -> None:
        self.client = grpcclient.InferenceServerClient(
            server.grpc_url, channel_args=[("grpc.use_local_subchannel_pool", 1)]
        )
        self.answers: queue.Queue[Any] = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.answers.put(error or result))

    def send(self, count: int, delay_ms: int) -> None:
        values = grpcclient.InferInput("IN", [2], "INT32")
        values.set_data_from_numpy(np.array([count, delay_ms], dtype=np.int32))
        self.client.async_stream_infer("paced", [values])

    def take(self, count: int, timeout: float) -> list[Any]:
        return [self.answers.get(timeout=timeout) for _ in range(count)]

    def until_end(self) -> list[Any]:
        """The answers still to come, up to an error or the last (IDX 11)."""
        answers = []
        while True:
            answer = self.answers.get(timeout=30)
            answers.append(answer)
            if isinstance(answer, Exception) or answer.as_numpy("IDX")[0] == 11:
                return answers

    def close(self) -> None:
        self.client.stop_stream(cancel_requests=True)
        self.client.close()


def test_a_frontend_killed_mid_stream_fails_only_its_own_streams(server: RunningServer) -> None:
    wait_for_frontends(server, 2)
    streams: dict[int, list[Stream]] = {}
    opened: list[Stream] = []
    try:
        for _ in range(16):  # until each frontend serves a stream
            before = _grpc_peers(server)
            stream = Stream(server)
            opened.append(stream)
            stream.send(count=12, delay_ms=400)  # 5 s of answers
            stream.take(1, timeout=30)  # its first answer: the connection is up and the stream flows
            (pid,) = {pid for pid, _ in _grpc_peers(server) - before}
            streams.setdefault(pid, []).append(stream)
            if len(streams) == 2:
                break
        assert len(streams) == 2, "SO_REUSEPORT should spread gRPC connections over both frontends"
        (doomed_pid, doomed), (_, survivors) = streams.items()
        os.kill(doomed_pid, signal.SIGKILL)
        for stream in doomed:  # the stream fails before its end...
            answers = stream.until_end()
            assert isinstance(answers[-1], Exception) and len(answers) < 12, answers
        for stream in survivors:  # ...and the others keep streaming to their end
            answers = stream.until_end()
            assert not any(isinstance(a, Exception) for a in answers), answers
            assert answers[-1].as_numpy("IDX")[0] == 11
    finally:
        for stream in opened:
            stream.close()
    wait_for_frontends(server, 2)


VERSIONED = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.version = int(args["model_version"])

    def execute(self, requests):
        out = pb_utils.Tensor("VERSION", np.array([self.version], dtype=np.int32))
        return [pb_utils.InferenceResponse(output_tensors=[out]) for _ in requests]
"""

VERSIONED_CONFIG = """
name: "versioned"
backend: "python"
max_batch_size: 0
version_policy: {{ specific: {{ versions: [{version}] }} }}
input [ {{ name: "IN", data_type: TYPE_INT32, dims: [ 1 ] }} ]
output [ {{ name: "VERSION", data_type: TYPE_INT32, dims: [ 1 ] }} ]
"""


def test_reloads_while_frontends_serve_never_show_a_half_updated_model(tmp_path: Path) -> None:
    """A rolling update between two versions while clients of both frontends keep asking: every request is
    answered, each by one whole version (the version it names is the one that computed its answer)."""
    repo = tmp_path / "repo"
    for version in (1, 2):
        (repo / "versioned" / str(version)).mkdir(parents=True)
        (repo / "versioned" / str(version) / "model.py").write_text(VERSIONED)
    (repo / "versioned" / "config.pbtxt").write_text(VERSIONED_CONFIG.format(version=1))
    server = start_server(
        [repo], tmp_path / "server.log", "--frontend-processes=2", "--model-control-mode=explicit",
        "--load-model=versioned",
    )  # fmt: skip
    stop = threading.Event()
    seen: list[tuple[str, int]] = []
    failures: list[BaseException] = []

    def ask() -> None:
        client = httpclient.InferenceServerClient(server.http_url)
        value = httpclient.InferInput("IN", [1], "INT32").set_data_from_numpy(np.array([1], dtype=np.int32))
        try:
            while not stop.is_set():
                result = client.infer("versioned", [value])
                version = result.as_numpy("VERSION")
                assert version is not None
                seen.append((result.get_response()["model_version"], int(version[0])))
        except BaseException as e:
            failures.append(e)
        finally:
            client.close()

    try:
        askers = [threading.Thread(target=ask) for _ in range(4)]
        for asker in askers:
            asker.start()
        control = grpcclient.InferenceServerClient(server.grpc_url)
        for i in range(6):  # a rolling update each way, three times
            config = VERSIONED_CONFIG.format(version=2 - i % 2).replace("\n", " ")
            control.load_model("versioned", config=json.dumps(_config_json(config)))
            time.sleep(0.3)
        control.close()
        stop.set()
        for asker in askers:
            asker.join(30)
        assert failures == []
        assert seen and all(version == str(value) for version, value in seen), set(seen)
        assert {value for _, value in seen} == {1, 2}
    finally:
        stop.set()
        assert server.stop() == 0


def _config_json(pbtxt: str) -> dict[str, Any]:
    """A config.pbtxt as the load API's JSON config."""
    config = text_format.Parse(pbtxt, ModelConfig())
    result: dict[str, Any] = json_format.MessageToDict(config, preserving_proto_field_name=True)
    return result
