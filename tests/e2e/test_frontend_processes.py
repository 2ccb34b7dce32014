"""--frontend-processes=N: the process layout, its faults and its limits, through real clients.

Every other end-to-end module already runs against two frontend processes too (the conftest's
`frontend_processes` parameter); this one covers what only the layout has: frontends killed and restarted, the
engine killed, a full frontend buffer, clients that go away, draining on SIGTERM and the shared port.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from e2e.models import copy_examples
from e2e.server_process import RunningServer, free_ports, running_server, start_server

PYTHON_MODELS = Path(__file__).parent / "python_models"
BUFFER = 200_000  # --frontend-buffer-byte-size of the module's server


@pytest.fixture(scope="module")
def frontend_processes() -> int:
    """This module names its own modes: it runs once, not once per mode."""
    return 2


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("frontends")
    copy_examples(root, "simple")
    shutil.copytree(PYTHON_MODELS / "identity_delay", root / "identity_delay")
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
        killed_at = time.monotonic()
        os.kill(doomed_pid, signal.SIGKILL)
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            lost.result(timeout=30)
        status, body = kept.result(timeout=30)
    assert status == 200, body
    # New connections are served at once by the frontend left, and a new frontend listens within 2 s.
    for _ in range(5):
        connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
        assert post(connection, infer_body())[0] == 200
        connection.close()
    pids = wait_for_frontends(server, 2)
    assert doomed_pid not in pids
    back_after = time.monotonic() - killed_at  # 2 s is the aim; the log says how long the restart took
    assert back_after < 10
    # Frontends hold no shared memory: whatever appeared belongs to the engine's python-backend instances.
    new_segments = set(os.listdir("/dev/shm")) - shm_before
    assert all(f"_{server.process.pid}_" in name for name in new_segments), new_segments
    assert "exited with status -9; restarting it" in server.log()
    survivor.close()
    doomed.close()


def test_a_full_frontend_buffer_answers_503_at_once_and_counts_a_rejection(server: RunningServer) -> None:
    before = stats(server, "identity_delay")["fail"]["count"]  # type: ignore[index]
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    started = time.monotonic()
    status, body = post(connection, infer_body(values=BUFFER // 4))  # its JSON alone is over the buffer
    assert status == 503
    assert time.monotonic() - started < 5
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
