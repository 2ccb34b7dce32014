"""The server a tuning run measures: one it starts itself (on a private repository that links the model), or a
running one given with --url (in explicit model-control mode).

Variants are loaded through the model-control API with the config as the load request's `config` parameter,
so nothing is written into the user's repository, and the same path serves both kinds of target.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

STARTUP_TIMEOUT_S = 300.0


class TuneError(Exception):
    """A run that cannot go on; `modelhost tune` prints it as one line and exits non-zero."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _error_text(body: bytes) -> str:
    try:
        value = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()
    if isinstance(value, dict) and "error" in value:
        return str(value["error"])
    return body.decode("utf-8", "replace").strip()


class Target:
    """A Triton-compatible server reachable over HTTP at `url` (host:port)."""

    def __init__(self, url: str, model: str, metrics_url: str | None, pid: int | None = None) -> None:
        self.url = url
        self.model = model
        self.metrics_url = metrics_url
        self.pid = pid
        self._served: str | None = None  # the config JSON served before the run (check_control)

    def _request(
        self, method: str, path: str, body: dict[str, object] | None, timeout: float
    ) -> tuple[int, bytes]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"http://{self.url}{path}", data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return int(response.status), bytes(response.read())
        except urllib.error.HTTPError as error:
            return int(error.code), bytes(error.read())
        except (OSError, urllib.error.URLError) as error:
            raise TuneError(f"cannot reach the server at {self.url}: {error}") from None

    def config(self) -> dict[str, object]:
        status, body = self._request("GET", f"/v2/models/{quote(self.model, safe='')}/config", None, 30)
        if status != 200:
            raise TuneError(f"model {self.model!r}: the server has no config for it: {_error_text(body)}")
        value = json.loads(body)
        if not isinstance(value, dict):
            raise TuneError(f"model {self.model!r}: the server's config is not a JSON object")
        return value

    def load(self, config_json: str | None, timeout: float) -> str | None:
        """Load the model with this config (None: the repository's own); the server's error, or None."""
        body: dict[str, object] = {}
        if config_json is not None:
            body = {"parameters": {"config": config_json}}
        path = f"/v2/repository/models/{quote(self.model, safe='')}/load"
        try:
            status, answer = self._request("POST", path, body, max(timeout, 1.0))
        except TuneError as error:
            return str(error)
        except TimeoutError:
            return f"the load did not finish within {timeout:.0f} s"
        return None if status == 200 else _error_text(answer)

    def alive(self) -> bool:
        try:
            status, _ = self._request("GET", "/v2/health/live", None, 5)
        except TuneError:
            return False
        return status == 200

    def check_control(self, timeout: float) -> None:
        """A server given with --url must allow model control (explicit mode): load the model as the repository
        has it, which is also where a run starts from."""
        error = self.load(None, timeout)
        if error is not None:
            raise TuneError(
                f"the server at {self.url} cannot load model {self.model!r}: {error} (start it with "
                "--model-control-mode=explicit)"
            )
        # What it serves now, given back at the end: a load without a config keeps the last override (Triton's
        # rule, modelhost's too), so the run's own configs would otherwise stay.
        self._served = json.dumps(self.config())

    def restore(self) -> None:
        """Serve the model as it was served before the run (a server given with --url)."""
        self.load(self._served, 60)

    def close(self) -> None:
        pass


class OwnServer(Target):
    """`modelhost serve` in explicit mode on a private repository holding (a link to) the model's directory."""

    def __init__(
        self,
        repository: str,
        model: str,
        log_path: Path,
        flags: list[str],
        timeout: float = STARTUP_TIMEOUT_S,
    ) -> None:
        http_port, grpc_port, metrics_port = _free_port(), _free_port(), _free_port()
        super().__init__(f"127.0.0.1:{http_port}", model, f"http://127.0.0.1:{metrics_port}/metrics")
        self._tmp: str | None = None
        if "://" not in repository:
            # Nothing is ever written to the model's directory (variants come as load overrides): a link is a copy.
            self._tmp = tempfile.mkdtemp(prefix="modelhost-tune-")
            os.symlink(Path(repository, model).resolve(), Path(self._tmp, model))
            repository = self._tmp
        self.log_path = log_path
        self._log = log_path.open("ab")
        command = [
            sys.executable,
            "-m",
            "modelhost",
            "serve",
            f"--model-repository={repository}",
            "--model-control-mode=explicit",
            f"--load-model={model}",
            f"--http-port={http_port}",
            f"--grpc-port={grpc_port}",
            f"--metrics-port={metrics_port}",
            "--allow-sagemaker=false",
            *flags,
        ]
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)
        self.pid = self.process.pid
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.close()  # the caller gets no object to close: no server, log handle or link left behind
            raise

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        path = f"/v2/models/{quote(self.model, safe='')}/ready"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise TuneError(
                    f"the server stopped (exit code {self.process.returncode}): {self._log_tail()}"
                )
            with contextlib.suppress(TuneError):
                status, _ = self._request("GET", path, None, 5)
                if status == 200:
                    return
            time.sleep(0.2)
        raise TuneError(
            f"the server did not make model {self.model!r} ready in {timeout:.0f} s: {self._log_tail()}"
        )

    def _log_tail(self) -> str:
        """The server's error lines (Triton's `E1124 12:00:00.000 ...` form), else its last lines."""
        self._log.flush()
        lines = self.log_path.read_text(errors="replace").strip().splitlines()
        errors = [line for line in lines if re.match(r"E\d{4} ", line)]
        return " | ".join((errors or lines)[-3:]) or f"(no output; see {self.log_path})"

    def alive(self) -> bool:
        return self.process.poll() is None and super().alive()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
