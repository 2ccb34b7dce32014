"""The runner's model: suites, configurations, test runs and their results; the server and the test processes.

A suite (one `qa/L0_*` of Triton's repository) is a list of configurations. A configuration is what its
`test.sh` does between one `run_server` and the matching `kill_server`: the model repository is prepared
(`Config.setup`), modelhost is started with the suite's flags, test files are run against it (`Run`) and
checks made (`Check`), and the server is stopped. Every test's outcome is kept as a `TestResult`.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import psutil

# Outcomes of one test. "known": it failed, and the recipe expects that because of a feature modelhost lists as
# not yet done (another issue). "skipped": the test skipped itself at run time.
Outcome = Literal["passed", "failed", "errored", "skipped", "known"]
OUTCOMES: tuple[Outcome, ...] = ("passed", "failed", "errored", "skipped", "known")

# Categories of what a recipe leaves out.
GPU = "needs a GPU"
TENSORRT = "needs TensorRT"
TENSORFLOW = "needs TensorFlow models"
CPP_BACKEND = "needs a C++ custom backend"
CPP_CLIENT = "needs a C++ test client"
RUNTIME = "left out for time"
OTHER = "other"

DRIVER = Path(__file__).with_name("driver.py")
STAND_INS = Path(__file__).with_name("stand_ins")
SHIM = Path(__file__).with_name("shim")


@dataclass
class Run:
    """One invocation of a test file, as test.sh does it: `python3 FILE TESTS...` or `pytest FILE::SEL`."""

    file: str
    tests: Sequence[str] = ()
    pytest: bool = False
    env: dict[str, str] = field(default_factory=dict)
    args: Sequence[str] = ()
    timeout: float = 600.0
    # The folder the test runs in, relative to the suite's (L0_backend_python's subtests run in theirs).
    cwd: str = ""
    # fnmatch patterns of tests (ids or bare names) not to run -> why (a GPU, a C++ backend, ...): reported as
    # skipped, with the reason.
    skip: dict[str, str] = field(default_factory=dict)


@dataclass
class Check:
    """A check test.sh makes itself (a line in the server log, a file the server wrote, ...): `fn` returns
    None when it holds, else the failure's message."""

    name: str
    fn: Callable[[SuiteContext, Server | None], str | None]


@dataclass
class Config:
    """What test.sh does between one `run_server` and its `kill_server`."""

    name: str
    args: Sequence[str]
    steps: Sequence[Run | Check]
    setup: Callable[[SuiteContext], None] | None = None
    env: dict[str, str] = field(default_factory=dict)
    # ready: wait for /v2/health/ready (run_server); live: /v2/health/live (run_server_tolive); nowait:
    # start and go on (run_server_nowait); fail: the server must not come up (a check of its own); none: no server.
    start: Literal["ready", "live", "nowait", "fail", "none"] = "ready"
    # fnmatch patterns of test ids (or bare test names) -> why they are expected to fail (another issue).
    known: dict[str, str] = field(default_factory=dict)
    # fnmatch patterns -> why a failure there is likely not modelhost's (the client library, the machine, the
    # harness): the test still counts as failed, with this note in the summary.
    suspect: dict[str, str] = field(default_factory=dict)
    # The configuration needs a flag or feature modelhost lists as not yet there: if the server refuses to
    # start, its tests are expected failures with this reason.
    unsupported: str | None = None
    # Where test.sh writes the server's log, relative to the suite's folder, when a test reads it by that name
    # (SERVER_LOG names it too); copied to the logs folder afterwards.
    server_log: str | None = None
    # Checks made after the server has stopped (the files it wrote at exit).
    after: Sequence[Check] = ()
    # Seconds to wait after starting the server before the steps, where `start` is nowait (test.sh's sleep).
    settle: float = 0.0
    start_timeout: float = 240.0
    stop_timeout: float = 60.0
    # Before the server starts, the models of its repositories get the python stand-ins for Triton's C++ test
    # backends and KIND_CPU instances (models.translate_repositories).
    translate_models: bool = True
    # Run only with --full: a variant of configurations that run anyway, left out by default for time.
    full_only: bool = False
    # The server's working directory, relative to the suite's folder: where test.sh starts it (python models
    # open files by paths relative to it).
    server_cwd: str = ""


@dataclass
class LeftOut:
    """Something of the suite the runner does not run, and why."""

    what: str
    category: str
    reason: str = ""


@dataclass
class Suite:
    name: str
    configs: Callable[[SuiteContext], list[Config]]
    left_out: Sequence[LeftOut] = ()
    notes: Sequence[str] = ()
    # The suite's folder in qa/ when it is not `name` (L0_ragged_batching is qa/L0_batch_input).
    qa_dir: str | None = None
    # Packages test.sh pip-installs for its tests: installed once into the cache, on the tests' sys.path after
    # the environment's own packages.
    pip: Sequence[str] = ()


@dataclass
class TestResult:
    __test__ = False  # not a pytest test class

    id: str
    outcome: Outcome
    message: str = ""
    reason: str = ""

    def to_json(self) -> dict[str, str]:
        d = {"id": self.id, "outcome": self.outcome}
        if self.message:
            d["message"] = self.message
        if self.reason:
            d["reason"] = self.reason
        return d


@dataclass
class ConfigResult:
    suite: str
    name: str
    server_args: list[str]
    results: list[TestResult] = field(default_factory=list)
    seconds: float = 0.0
    note: str = ""
    server_log: str = ""

    def counts(self) -> dict[str, int]:
        c = dict.fromkeys(OUTCOMES, 0)
        for r in self.results:
            c[r.outcome] += 1
        return c

    def to_json(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "name": self.name,
            "server_args": self.server_args,
            "seconds": round(self.seconds, 1),
            "note": self.note,
            "server_log": self.server_log,
            "counts": self.counts(),
            "results": [r.to_json() for r in self.results],
        }


@dataclass
class SuiteResult:
    name: str
    configs: list[ConfigResult] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""

    def counts(self) -> dict[str, int]:
        c = dict.fromkeys(OUTCOMES, 0)
        for cfg in self.configs:
            for k, v in cfg.counts().items():
                c[k] += v
        return c

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "seconds": round(self.seconds, 1),
            "error": self.error,
            "counts": self.counts(),
            "configs": [c.to_json() for c in self.configs],
            "left_out": [{"what": x.what, "category": x.category, "reason": x.reason} for x in self.left_out],
            "notes": list(self.notes),
        }


@dataclass
class SuiteContext:
    """Paths and helpers a recipe uses. `work` is the suite's folder (a copy of qa/<suite>), the working
    directory of the server and of the tests, as in Triton's CI."""

    triton: Path
    qa: Path
    work: Path
    cache: Path
    logs: Path
    python: str
    log: Callable[[str], None] = print
    verbose: bool = False
    pydeps: list[Path] = field(default_factory=list)
    # tritonclient of the release the tests were written for, ahead of the installed one in the tests' path (None:
    # the installed one).
    client: Path | None = None
    # Set by the runner while a configuration runs.
    server_log: Path | None = None
    config: str = ""

    def data(self, name: str) -> Path:
        """A repository of generated models, as /data/inferenceserver/<version>/<name> in Triton's CI."""
        from triton_qa import models

        return models.generated(self, name)

    def path(self, rel: str) -> Path:
        return self.work / rel


def log_tail(path: Path | None, lines: int = 15) -> str:
    if path is None or not path.exists():
        return ""
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


def _port_of(args: Sequence[str], flag: str, default: int) -> int:
    value: str | None = None
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            value = a.split("=", 1)[1]
        elif a == flag and i + 1 < len(args):
            value = args[i + 1]
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _http_status(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (OSError, ValueError):
        return 0


def kill_tree(proc: psutil.Process | None, pgid: int | None, grace: float = 0.0) -> None:
    """Ends a process, its descendants and its process group, by id."""
    victims: list[psutil.Process] = []
    if proc is not None:
        with contextlib.suppress(psutil.Error):
            victims = [proc, *proc.children(recursive=True)]
    if pgid is not None:
        for p in psutil.process_iter(["pid"]):
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(p.pid) == pgid and p not in victims:
                    victims.append(p)
    if grace > 0:
        for p in victims:
            with contextlib.suppress(psutil.Error):
                p.terminate()
        _, victims = psutil.wait_procs(victims, timeout=grace)
    for p in victims:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(victims, timeout=10)


class Server:
    """modelhost started as tritonserver would be: `python -m modelhost serve ARGS`, output in SERVER_LOG."""

    def __init__(
        self, ctx: SuiteContext, args: Sequence[str], env: dict[str, str], log_path: Path, cwd: str = ""
    ) -> None:
        self.ctx = ctx
        self.cwd = ctx.work / cwd
        self.args = list(args)
        self.env = env
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.http_port = _port_of(self.args, "--http-port", 8000)
        self.ports = [
            self.http_port,
            _port_of(self.args, "--grpc-port", 8001),
            _port_of(self.args, "--metrics-port", 8002),
        ]

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else 0

    def launch(self) -> None:
        deadline = time.monotonic() + 60
        while not all(_port_free(p) for p in self.ports) and time.monotonic() < deadline:
            time.sleep(1)
        busy = [p for p in self.ports if not _port_free(p)]
        if busy:
            self.ctx.log(f"    warning: ports {busy} still in use; starting anyway")
        cmd = [self.ctx.python, "-m", "modelhost", "serve", *self.args]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"=== Running {shlex.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                cmd,
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def wait(self, endpoint: str, timeout: float) -> str | None:
        """Waits until GET /v2/health/<endpoint> answers 200; returns None, or why not."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        url = f"http://localhost:{self.http_port}/v2/health/{endpoint}"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"the server exited with status {self.proc.returncode}"
            if _http_status(url) == 200:
                return None
            time.sleep(0.5)
        return f"not {endpoint} after {timeout:.0f}s"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM as kill_server does; SIGKILL to everything it started if it has not exited in `timeout`."""
        if self.proc is None:
            return None
        try:
            ps: psutil.Process | None = psutil.Process(self.proc.pid)
        except psutil.Error:
            ps = None
        children: list[psutil.Process] = []
        if ps is not None:
            with contextlib.suppress(psutil.Error):
                children = ps.children(recursive=True)
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.ctx.log(f"    server did not exit {timeout:.0f}s after SIGTERM: killed")
                with open(self.log_path, "ab") as log:
                    log.write(b"=== triton_qa: no exit after SIGTERM, killed\n")
        rc = self.proc.poll()
        # Whatever is left of it: the process, its group, and its children found before it ended.
        kill_tree(ps if rc is None else None, self.proc.pid)
        for c in children:
            with contextlib.suppress(psutil.Error):
                if c.is_running():
                    kill_tree(c, None)
        self.proc.wait()
        return rc


def run_process(
    ctx: SuiteContext,
    cmd: Sequence[str],
    env: dict[str, str],
    log_path: Path,
    timeout: float,
    cwd: Path | None = None,
) -> tuple[int | None, bool]:
    """Runs a test process in its own session, its output appended to log_path. Returns (status, timed out)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"\n=== {shlex.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            cmd,
            cwd=cwd or ctx.work,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        timed_out = False
        try:
            rc: int | None = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            rc = None
            log.write(f"\n=== triton_qa: timed out after {timeout:.0f}s, killed\n".encode())
        except BaseException:  # interrupted: leave nothing behind
            kill_tree(psutil.Process(proc.pid) if proc.poll() is None else None, proc.pid)
            raise
        try:
            ps: psutil.Process | None = psutil.Process(proc.pid)
        except psutil.Error:
            ps = None
        kill_tree(ps if timed_out else None, proc.pid)
        proc.wait()
    return rc, timed_out


def short_message(text: str, lines: int = 8) -> str:
    """The first lines of a failure that say what it is: for a traceback, the exception and where it was
    raised; else the first lines."""
    all_lines = text.strip().splitlines()
    if not all_lines:
        return ""
    frames = [i for i, line in enumerate(all_lines) if line.lstrip().startswith('File "')]
    if frames and any(line.startswith("Traceback") for line in all_lines):
        last = frames[-1]
        exc_start = next(
            (i for i in range(last + 1, len(all_lines)) if not all_lines[i].startswith(" ")), None
        )
        if exc_start is not None:
            where = re.sub(r'File ".*?/qa/', 'File "qa/', all_lines[last].strip())
            return "\n".join([*all_lines[exc_start : exc_start + max(lines - 1, 1)], f"({where})"])
    return "\n".join(all_lines[:lines])


def parse_driver_results(path: Path, prefix: str) -> list[TestResult]:
    """The JSON the driver writes: [{id, outcome, message}]."""
    if not path.exists():
        return []
    try:
        records = json.loads(path.read_text() or "[]")
    except json.JSONDecodeError:
        return []
    out: list[TestResult] = []
    for r in records:
        outcome = r.get("outcome", "errored")
        if outcome not in OUTCOMES:
            outcome = "errored"
        out.append(TestResult(f"{prefix}.{r['id']}", outcome, r.get("message", "")))
    return out


def parse_junit(path: Path, stem: str = "") -> list[TestResult]:
    """pytest's --junitxml: one testcase per test, with a failure, error or skipped child. Ids start with the
    file's stem (pytest leaves it out for a file outside its rootdir)."""
    if not path.exists():
        return []
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        return []
    out: list[TestResult] = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}.{case.get('name', '')}".strip(".")
        if stem and not name.startswith(stem + "."):
            name = f"{stem}.{name}"
        outcome: Outcome = "passed"
        message = ""
        for child in case:
            text = ((child.get("message") or "") + "\n" + (child.text or "")).strip()
            if child.tag == "failure":
                outcome, message = "failed", text
            elif child.tag == "error":
                # pytest reports a teardown error beside a failure: keep the failure.
                if outcome != "failed":
                    outcome, message = "errored", text
            elif child.tag == "skipped":
                outcome, message = "skipped", (child.get("message") or "").strip()
        out.append(TestResult(name, outcome, message))
    return out


_PYTEST_LINE = re.compile(
    r"^(?P<file>[^\s:]+\.py)::(?P<rest>\S+)( (?P<status>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS))?"
)


def parse_pytest_output(text: str, stem: str) -> list[TestResult]:
    """`pytest -v` lines (`file.py::Class::test PASSED`), for a run killed before it wrote its junit file: the
    test left without a status is the one that hung."""
    status_map: dict[str, Outcome] = {
        "PASSED": "passed",
        "XFAIL": "passed",
        "FAILED": "failed",
        "XPASS": "failed",
        "ERROR": "errored",
        "SKIPPED": "skipped",
    }
    out: list[TestResult] = []
    for line in text.splitlines():
        m = _PYTEST_LINE.match(line.strip())
        if not m:
            continue
        test_id = f"{stem}.{m.group('rest').replace('::', '.')}"
        status = m.group("status")
        if status is None:
            out.append(
                TestResult(test_id, "errored", "no result: the test was still running when the run ended")
            )
        else:
            out.append(TestResult(test_id, status_map[status], "(from the pytest output: no junit file)"))
    return out


def run_tests(
    ctx: SuiteContext, run: Run, env: dict[str, str], client_log: Path, tag: str
) -> list[TestResult]:
    """Runs one `Run` and returns its tests' results."""
    stem = Path(run.file).stem
    cwd = ctx.work / run.cwd
    results_dir = ctx.logs / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    full_env = {**env, **run.env}
    if ctx.client is not None:  # for the tests only: a server they start drops it (tritonserver_shim)
        full_env["PYTHONPATH"] = os.pathsep.join([str(SHIM), str(ctx.client), full_env.get("PYTHONPATH", "")])
        full_env["TRITON_QA_CLIENT"] = str(ctx.client)
    if run.pytest:
        xml = results_dir / f"{tag}.xml"
        xml.unlink(missing_ok=True)
        targets = [f"{run.file}::{t}" for t in run.tests] if run.tests else [run.file]
        deselect = []
        if run.skip:
            for test_id in list_tests(ctx, run, full_env):
                reason = match_known(test_id, run.skip)
                if reason:
                    deselect.append(test_id)
        ini = ctx.work.parent / "pytest.ini"
        cmd = [
            ctx.python,
            "-m",
            "pytest",
            "-c",
            str(ini),
            "--rootdir",
            str(cwd),
            "-p",
            "no:cacheprovider",
            f"--junitxml={xml}",
            "-v",
            *run.args,
            *targets,
            *(f"--deselect={_node_id(run.file, t)}" for t in deselect),
        ]
        offset = client_log.stat().st_size if client_log.exists() else 0
        rc, timed_out = run_process(ctx, cmd, full_env, client_log, run.timeout, cwd)
        results = parse_junit(xml, stem)
        if not xml.exists():
            with open(client_log, "rb") as f:
                f.seek(offset)
                results = parse_pytest_output(f.read().decode(errors="replace"), stem)
        results += [TestResult(t, "skipped", match_known(t, run.skip) or "") for t in deselect]
        expected = [f"{stem}.{t.replace('::', '.')}" for t in run.tests]
    else:
        out = results_dir / f"{tag}.json"
        out.unlink(missing_ok=True)
        skips = [f"--skip={pattern}={reason}" for pattern, reason in run.skip.items()]
        cmd = [ctx.python, str(DRIVER), "--results", str(out), *skips, run.file, *run.tests, *run.args]
        rc, timed_out = run_process(ctx, cmd, full_env, client_log, run.timeout, cwd)
        results = parse_driver_results(out, stem)
        expected = [f"{stem}.{t}" for t in run.tests if not t.startswith("-")]
    seen = {r.id for r in results}
    why = f"timed out after {run.timeout:.0f}s" if timed_out else f"the test process exited with status {rc}"
    if timed_out:
        # The tests the run would have run after the one that hung.
        results += [
            TestResult(t, "errored", f"not run: {why} on an earlier test")
            for t in list_tests(ctx, run, full_env)
            if t not in seen and not t.endswith(".<run>") and match_known(t, run.skip) is None
        ]
        seen = {r.id for r in results}
    missing = [
        e for e in expected if e not in seen and not any(s.startswith(e + ".") for s in seen) and "." in e
    ]
    if timed_out or (rc not in (0, None) and not any(r.outcome in ("failed", "errored") for r in results)):
        tail = log_tail(client_log, 12)
        if missing:
            results += [TestResult(m, "errored", f"{why}\n{tail}") for m in missing]
        elif not results or timed_out:
            results.append(TestResult(f"{stem}.<run>", "errored", f"{why}\n{tail}"))
    elif missing:
        tail = log_tail(client_log, 12)
        results += [TestResult(m, "errored", f"no result recorded ({why})\n{tail}") for m in missing]
    return results


def _node_id(file: str, test_id: str) -> str:
    """stem.Class.test -> file::Class::test (pytest's node id)."""
    parts = test_id.split(".")[1:]
    return "::".join([file, *parts])


def list_tests(ctx: SuiteContext, run: Run, env: dict[str, str]) -> list[str]:
    """The ids of the tests a Run would run, without a server (for a configuration that could not start)."""
    stem = Path(run.file).stem
    cwd = ctx.work / run.cwd
    if run.pytest:
        cmd = [
            ctx.python,
            "-m",
            "pytest",
            "-c",
            str(ctx.work.parent / "pytest.ini"),
            "--rootdir",
            str(cwd),
        ]
        cmd += ["-p", "no:cacheprovider", "--collect-only", "-q"]
        cmd += [f"{run.file}::{t}" for t in run.tests] if run.tests else [run.file]
        try:
            out = subprocess.run(
                cmd, cwd=cwd, env={**env, **run.env}, capture_output=True, text=True, timeout=120
            ).stdout
        except subprocess.TimeoutExpired:
            return [f"{stem}.{t}" for t in run.tests] or [f"{stem}.<run>"]
        ids = []
        for line in out.splitlines():
            if "::" in line and not line.startswith(" "):
                path, _, rest = line.partition("::")
                ids.append(f"{Path(path).stem}.{rest.replace('::', '.')}")
        return ids or [f"{stem}.<run>"]
    out_path = ctx.logs / "results" / f"list-{stem}.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [ctx.python, str(DRIVER), "--list", "--results", str(out_path), run.file, *run.tests]
    try:
        subprocess.run(cmd, cwd=cwd, env={**env, **run.env}, capture_output=True, timeout=120)
        ids = json.loads(out_path.read_text())
        return [f"{stem}.{i}" for i in ids] or [f"{stem}.<run>"]
    except (subprocess.TimeoutExpired, OSError, json.JSONDecodeError):
        return [f"{stem}.{t}" for t in run.tests] or [f"{stem}.<run>"]


def match_known(test_id: str, known: dict[str, str]) -> str | None:
    short = test_id.rsplit(".", 1)[-1]
    for pattern, reason in known.items():
        if fnmatch.fnmatchcase(test_id, pattern) or fnmatch.fnmatchcase(short, pattern):
            return reason
        if fnmatch.fnmatchcase(test_id, f"*.{pattern}") or fnmatch.fnmatchcase(test_id, f"*{pattern}"):
            return reason
    return None


def apply_known(
    results: Iterable[TestResult], known: dict[str, str], suspect: dict[str, str] | None = None
) -> list[TestResult]:
    """Failures the recipe expects (another issue) become "known"; those it suspects are not modelhost's keep
    their outcome and get the note as their reason."""
    out = []
    for r in results:
        if r.outcome in ("failed", "errored"):
            reason = match_known(r.id, known)
            if reason:
                r = TestResult(r.id, "known", r.message, reason)
            elif suspect:
                note = match_known(r.id, suspect)
                if note:
                    r = TestResult(r.id, r.outcome, r.message, f"likely not modelhost: {note}")
        out.append(r)
    return out


def tritonserver_shim(ctx: SuiteContext) -> Path:
    """<cache>/bin/tritonserver: `python -m modelhost serve "$@"`, for tests that start `tritonserver` from PATH."""
    bindir = ctx.cache / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    shim = bindir / "tritonserver"
    # The server runs with the packages of --python, never with the tests' tritonclient (TRITON_QA_CLIENT, on
    # the path of the tests that start it), whose protos are older than those modelhost reads configs with.
    text = (
        "#!/bin/sh\n"
        'if [ -n "$TRITON_QA_CLIENT" ]; then\n'
        '  PYTHONPATH=$(printf %s "$PYTHONPATH" | tr : "\\n" | grep -vxF "$TRITON_QA_CLIENT" | paste -sd: -)\n'
        "  export PYTHONPATH\n"
        "fi\n"
        f'exec "{ctx.python}" -m modelhost serve "$@"\n'
    )
    if not shim.exists() or shim.read_text() != text:
        shim.write_text(text)
        shim.chmod(0o755)
    return bindir


def base_env(ctx: SuiteContext) -> dict[str, str]:
    """The environment test.sh gives the server and the tests in Triton's CPU-only CI containers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    pythonpath = [str(SHIM), str(ctx.qa / "common"), str(ctx.work), str(STAND_INS / "pylib")]
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(pythonpath),
            "TRITONSERVER_IPADDR": "localhost",
            "TRITON_SERVER_CPU_ONLY": "1",
            # Triton's containers set it; tests compare it with the server metadata's version (modelhost reports
            # the Triton release it follows).
            "TRITON_SERVER_VERSION": "2.51.0",
            "TRITON_QA_STAND_INS": str(STAND_INS.resolve()),
            "CUDA_VISIBLE_DEVICES": "",
            "BACKENDS": "onnx libtorch",
            "PYTHONUNBUFFERED": "1",
            "PATH": os.pathsep.join(
                [str(tritonserver_shim(ctx)), os.path.dirname(ctx.python), env.get("PATH", "")]
            ),
            "TRITON_QA_PYDEPS": os.pathsep.join(str(p) for p in ctx.pydeps),
        }
    )
    env.pop("VIRTUAL_ENV", None)
    return env


def stand_in_backends(ctx: SuiteContext) -> Path:
    """A backend directory (--backend-directory) in the cache with the stand-ins of Triton's C++ test backends as
    python-based backends: <dir>/identity/model.py, ... A model whose config names `identity` is served by it."""
    from triton_qa.models import STAND_IN_BACKENDS

    root = ctx.cache / "backends"
    for backend, stand_in in STAND_IN_BACKENDS.items():
        source = (STAND_INS / stand_in / "model.py").read_bytes()
        target = root / backend / "model.py"
        if not target.exists() or target.read_bytes() != source:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source)
    return root


# The tritonclient of Triton 2.51 (its qa tests compare some of its own client-side messages), without its
# dependencies (the installed grpcio, protobuf and geventhttpclient serve it), and the pkg_resources its shared-memory
# utilities import.
CLIENT_REQUIREMENTS = ("tritonclient[all]=={version}", "setuptools<70")


def install_client(ctx: SuiteContext, version: str) -> Path | None:
    """tritonclient `version` in a folder of the cache (once); None, with a line in the log, when pip fails."""
    target = ctx.cache / "pydeps" / f"tritonclient-{version}"
    if not (target / ".complete").exists():
        if target.exists():
            shutil.rmtree(target)
        ctx.log(f"  pip install tritonclient=={version} (into {target})")
        requirements = [r.format(version=version) for r in CLIENT_REQUIREMENTS]
        proc = subprocess.run(
            [
                ctx.python,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--target",
                str(target),
                *requirements,
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if proc.returncode != 0:
            ctx.log(f"    failed, the tests use the installed tritonclient: {proc.stderr.strip()[-500:]}")
            return None
        (target / ".complete").write_text("")
    return target


def install_pydeps(ctx: SuiteContext, requirements: Sequence[str]) -> list[str]:
    """pip install each requirement into its own folder of the cache (once); returns what could not be."""
    failed: list[str] = []
    for req in requirements:
        target = ctx.cache / "pydeps" / re.sub(r"[^A-Za-z0-9_.-]+", "_", req)
        if not (target / ".complete").exists():
            if target.exists():
                shutil.rmtree(target)
            ctx.log(f"  pip install {req} (into {target})")
            proc = subprocess.run(
                [ctx.python, "-m", "pip", "install", "--quiet", "--target", str(target), req],
                capture_output=True,
                text=True,
                timeout=900,
            )
            if proc.returncode != 0:
                ctx.log(f"    pip install {req} failed: {proc.stderr.strip()[-500:]}")
                failed.append(req)
                continue
            (target / ".complete").write_text("")
        ctx.pydeps.append(target)
    return failed


def prepare_work(triton: Path, root: Path, suite_dir: str) -> Path:
    """root/qa: every entry of the checkout's qa/ linked, except the suite's folder, copied afresh."""
    qa_src = triton / "qa"
    qa = root / "qa"
    qa.mkdir(parents=True, exist_ok=True)
    (root / "qa" / "pytest.ini").write_text("[pytest]\n")
    for entry in qa_src.iterdir():
        link = qa / entry.name
        if entry.name == suite_dir or link.exists() or link.is_symlink():
            continue
        link.symlink_to(entry)
    work = qa / suite_dir
    if work.is_symlink():
        work.unlink()
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(qa_src / suite_dir, work, symlinks=True)
    return work


def python_executable() -> str:
    return sys.executable
