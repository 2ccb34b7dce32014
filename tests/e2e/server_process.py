"""Start the real server in a subprocess on free ports, as users run it, and stop it with SIGTERM."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

# Explicit mode with every model loaded at startup (as none mode would load them), so that tests may also unload
# and load; models that fail to load on purpose leave the server up (--exit-on-error=false) and its ready
# endpoint at 200 (--strict-readiness=false), which running_server waits for.
LOAD_ALL_EXPLICITLY = (
    "--model-control-mode=explicit",
    "--load-model=*",
    "--exit-on-error=false",
    "--strict-readiness=false",
)


# --frontend-processes of the servers tests start, unless a test names its own: the e2e conftest runs every
# module once per mode (0: one process; 2: two HTTP frontend processes in front of the engine).
FRONTEND_MODES = (0, 2)
frontend_processes = 0


def free_ports(count: int) -> list[int]:
    """Ports free now, all different: the sockets are held open together while the OS picks, since ports picked
    one after the other can come back the same once each socket is closed."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]


@dataclass
class RunningServer:
    process: subprocess.Popen[bytes]
    http_port: int
    grpc_port: int
    metrics_port: int
    log_path: Path

    @property
    def http_url(self) -> str:
        return f"localhost:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"localhost:{self.grpc_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def _http_ok(
    port: int, path: str, headers: dict[str, str] | None = None, tls: ssl.SSLContext | None = None
) -> bool:
    try:
        scheme = "https" if tls is not None else "http"
        request = urllib.request.Request(f"{scheme}://127.0.0.1:{port}{path}", headers=headers or {})
        with urllib.request.urlopen(request, timeout=1, context=tls) as r:
            return bool(r.status == 200)
    except Exception:
        return False


def start_server(
    repositories: Sequence[Path | str],
    log_path: Path,
    *args: str,
    wait_ready: bool = True,
    timeout: float = 60,
    env: dict[str, str] | None = None,
    health_headers: dict[str, str] | None = None,
    health_tls: ssl.SSLContext | None = None,
) -> RunningServer:
    """`env`, when given, is the server's whole environment (PYTHONUNBUFFERED added); else this process's.
    `health_headers`: sent with the readiness checks (a server whose health API is restricted); `health_tls`: the
    client context they use (a server that serves HTTPS)."""
    http_port, grpc_port, metrics_port = free_ports(3)
    # Ports the caller names win (argparse takes the last), and the readiness checks use them.
    for arg in args:
        if arg.startswith("--http-port="):
            http_port = int(arg.split("=", 1)[1])
        elif arg.startswith("--grpc-port="):
            grpc_port = int(arg.split("=", 1)[1])
        elif arg.startswith("--metrics-port="):
            metrics_port = int(arg.split("=", 1)[1])
    command = [sys.executable, "-m", "modelhost", "serve"]
    command += [f"--model-repository={r}" for r in repositories]
    command += [f"--http-port={http_port}", f"--grpc-port={grpc_port}", f"--metrics-port={metrics_port}"]
    command += list(args)
    if not any(a.startswith("--frontend-processes") for a in args):
        command.append(f"--frontend-processes={frontend_processes}")
    environment = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment)
    server = RunningServer(process, http_port, grpc_port, metrics_port, log_path)
    deadline = time.monotonic() + timeout
    path = "/v2/health/ready" if wait_ready else "/v2/health/live"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{server.log()}")
        if _http_ok(http_port, path, health_headers, health_tls):
            return server
        time.sleep(0.1)
    server.stop(signal.SIGKILL)
    raise RuntimeError(f"server did not become ready in {timeout} s:\n{server.log()}")


@contextlib.contextmanager
def running_server(
    repositories: Sequence[Path | str],
    log_path: Path,
    *args: str,
    wait_ready: bool = True,
    env: dict[str, str] | None = None,
    health_headers: dict[str, str] | None = None,
    health_tls: ssl.SSLContext | None = None,
) -> Iterator[RunningServer]:
    server = start_server(
        repositories,
        log_path,
        *args,
        wait_ready=wait_ready,
        env=env,
        health_headers=health_headers,
        health_tls=health_tls,
    )
    try:
        yield server
    finally:
        server.stop()
