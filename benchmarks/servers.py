"""Start, watch and stop the servers under test (modelhost and the reference tritonserver)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_TRITON = Path("/work/shared/tools/reference-triton")
DEFAULT_MODELHOST_CMD = str(ROOT / ".venv" / "bin" / "modelhost")
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports that were free a moment ago (bound to port 0, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Ports:
    http: int
    grpc: int
    metrics: int

    @classmethod
    def pick(cls) -> Ports:
        return cls(*free_ports(3))


def server_command(
    kind: str,
    repo: Path,
    ports: Ports,
    modelhost_cmd: str = DEFAULT_MODELHOST_CMD,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line that serves ``repo`` on ``ports``; ``extra_args`` go at the end (for modelhost: after
    ``serve`` and the repository and port flags, e.g. ``--frontend-processes=2``)."""
    port_flags = [
        "--http-port",
        str(ports.http),
        "--grpc-port",
        str(ports.grpc),
        "--metrics-port",
        str(ports.metrics),
    ]
    if kind == "modelhost":
        cmd = [*shlex.split(modelhost_cmd), "serve", "--model-repository", str(repo), *port_flags]
        return [*cmd, *extra_args]
    if kind == "reference":
        return [str(REFERENCE_TRITON), "serve", str(repo), *port_flags, "--log-verbose=0", *extra_args]
    raise ValueError(f"unknown server {kind!r}")


@dataclass
class Server:
    """A server process in its own session (process group), so that it and its children (the reference's
    python-backend stubs) can be measured and stopped together."""

    name: str
    cmd: list[str]
    ports: Ports
    log_path: Path
    host: str = "127.0.0.1"
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.ports.http}"

    @property
    def grpc_target(self) -> str:
        return f"{self.host}:{self.ports.grpc}"

    def _get(self, path: str, timeout: float = 2.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.http_url + path, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def wait_ready(self, models: list[str], timeout: float = 180.0) -> None:
        """Wait for ``/v2/health/ready`` and each model's ready endpoint to answer 200."""
        deadline = time.monotonic() + timeout
        pending = ["/v2/health/ready", *(f"/v2/models/{m}/ready" for m in models)]
        while pending:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited (rc={self.proc and self.proc.returncode}):\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name} not ready after {timeout:.0f}s ({pending[0]}):\n{self.log_tail()}"
                )
            try:
                status, _ = self._get(pending[0])
            except (OSError, urllib.error.URLError):
                status = 0
            if status == 200:
                pending.pop(0)
            else:
                time.sleep(0.25)

    def model_config(self, model: str) -> dict[str, object] | None:
        try:
            status, body = self._get(f"/v2/models/{model}/config")
            return json.loads(body) if status == 200 else None
        except (OSError, ValueError):
            return None

    @staticmethod
    def _processes() -> dict[int, tuple[int, int, int, int]]:
        """pid -> (parent pid, process group, user+system clock ticks, start time) of every live process."""
        procs: dict[int, tuple[int, int, int, int]] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2 :].split()
            # fields[0] is field 3 (state): ppid is field 4, pgrp 5, utime 14, stime 15, starttime 22.
            procs[int(entry.name)] = (
                int(fields[1]),
                int(fields[2]),
                int(fields[11]) + int(fields[12]),
                int(fields[19]),
            )
        return procs

    def pids(self) -> set[int]:
        """The server's live processes: its process group plus every descendant of its main process (modelhost
        starts its python-backend stubs and its frontend processes in sessions of their own)."""
        if self.proc is None:
            return set()
        return self._pids(self._processes())

    def _pids(self, procs: dict[int, tuple[int, int, int, int]]) -> set[int]:
        assert self.proc is not None
        root = self.proc.pid
        mine = {pid for pid, (_, pgrp, _, _) in procs.items() if pgrp == root}
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        todo = [root] if root in procs else []
        while todo:
            pid = todo.pop()
            mine.add(pid)
            todo += [c for c in children.get(pid, ()) if c not in mine]
        return mine

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server's live processes (see :meth:`pids`): the reference's
        python-backend stubs, modelhost's stubs and frontend processes included."""
        if self.proc is None:
            return 0.0
        procs = self._processes()
        return sum(procs[pid][2] for pid in self._pids(procs)) / _CLK_TCK

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        pgid = self.proc.pid
        # Descendants in sessions of their own (modelhost's stubs and frontends): normally stopped by the server
        # itself; whatever is left of them when it has exited is killed below, identified by pid and start time
        # so that a reused pid is never hit.
        procs = self._processes()
        others = {(pid, procs[pid][3]) for pid in self._pids(procs) if pid != pgid}
        try:
            os.killpg(pgid, signal.SIGTERM)
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        except ProcessLookupError:
            pass
        # Leftover children of the group (e.g. python-backend stubs), by the group id we created.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while others:
            procs = self._processes()
            others = {(pid, start) for pid, start in others if pid in procs and procs[pid][3] == start}
            if not others or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        for pid, _ in others:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
