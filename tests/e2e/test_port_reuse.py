"""--reuse-http-port and --reuse-grpc-port: several servers on one port, the kernel spreading the connections;
without them a second server on a taken port stops with one clear message, whatever --frontend-processes."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from e2e import server_process
from e2e.models import copy_examples
from e2e.server_process import free_ports, running_server


def _names_seen(read_name: Callable[[], str], timeout_s: float = 60) -> set[str]:
    """Server names answering on new connections until both are seen. The second server's readiness check may
    be answered by the first, so the second may still be starting: keep asking for a while."""
    names: set[str] = set()
    deadline = time.monotonic() + timeout_s
    while len(names) < 2 and time.monotonic() < deadline:
        try:
            names.add(read_name())
        except InferenceServerException:  # the second server is listening but not ready yet
            time.sleep(0.05)
    return names


def test_two_servers_share_the_http_and_grpc_ports(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    copy_examples(repo, "simple")
    http_port, grpc_port = free_ports(2)
    shared = (f"--http-port={http_port}", f"--grpc-port={grpc_port}", "--reuse-http-port=true",
              "--reuse-grpc-port=true")  # fmt: skip
    with (
        running_server([repo], tmp_path / "a.log", *shared, "--id=server-a"),
        running_server([repo], tmp_path / "b.log", *shared, "--id=server-b"),
    ):

        def http_name() -> str:
            # A new connection each time: the kernel picks the listener per connection.
            client = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
            try:
                if not client.is_model_ready("simple"):
                    raise InferenceServerException("not ready")
                return str(client.get_server_metadata()["name"])
            finally:
                client.close()

        def grpc_name() -> str:
            client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
            try:
                if not client.is_model_ready("simple"):
                    raise InferenceServerException("not ready")
                return str(client.get_server_metadata().name)
            finally:
                client.close()

        assert _names_seen(http_name) == {"server-a", "server-b"}
        assert _names_seen(grpc_name) == {"server-a", "server-b"}


@pytest.mark.parametrize("taken", ["http", "grpc"])
def test_without_the_flag_a_second_server_on_the_port_stops(taken: str, tmp_path: Path) -> None:
    # Frontend processes share their port among themselves with SO_REUSEPORT; that must not let a second
    # server in unasked. The first server asks for reuse: only the second one's flag decides.
    repo = tmp_path / "repo"
    copy_examples(repo, "simple")
    (port,) = free_ports(1)
    with running_server([repo], tmp_path / "a.log", f"--{taken}-port={port}", f"--reuse-{taken}-port=true"):
        # Not start_server: its readiness check would be answered by the first server on the shared port.
        others = [
            f"--{name}-port={p}" for name, p in zip(("http", "grpc", "metrics"), free_ports(3), strict=True)
        ]
        command = [sys.executable, "-m", "modelhost", "serve", f"--model-repository={repo}", *others,
                   f"--{taken}-port={port}", f"--frontend-processes={server_process.frontend_processes}"]  # fmt: skip
        second = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    log = second.stdout + second.stderr
    assert second.returncode == 1, log
    assert log.count("address already in use") == 1, log
    assert "failed to start the server" in log and str(port) in log, log
