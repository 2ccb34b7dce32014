"""Soak, churn and faults: modelhost under mixed load for a long time, with models loading and unloading and its
processes killed, measuring what must not drift.

    .venv/bin/python benchmarks/soak.py --minutes 30 [--window 30] [--frontend-processes 2] [--json out.json]

One server (explicit model control) serves three models: `simple` (ONNX) over HTTP binary with wrk, `mlp`
(ONNX) over gRPC with h2load, and `identity` (a python `model.py`) over HTTP JSON with wrk, each at
`--concurrency`, in consecutive windows of `--window` seconds. Meanwhile, unless turned off:

- churn: a fourth model, `churn` (a copy of the python `identity`: stubs and shared memory come and go), is
  loaded and unloaded in a loop through the repository API, and its requests are not part of the load;
- faults: every `--fault-every` seconds a python-backend stub and (with frontend processes) a frontend process
  are killed with SIGKILL, in turn; only their requests in flight may fail.

Reported per window: requests, errors, req/s and p99 of each load, and the RSS of the server's whole process tree.
At the end: errors (all, and in windows without a fault), the RSS of the last window against the first after
warm-up, the p99 of the last five minutes against the first five, churn cycles, and whether stub processes or
`/dev/shm` files outlived the server.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import statistics
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import loadgen
import payloads
import psutil
from reference_repo import build_modelhost_repo, build_python_repo
from servers import Ports, Server, server_command

HERE = Path(__file__).resolve().parent


@dataclass
class Window:
    index: int
    started_s: float
    loads: dict[str, dict[str, float]] = field(default_factory=dict)
    rss_mib: float = 0.0
    faults: list[str] = field(default_factory=list)
    churn_cycles: int = 0


def _post(url: str, body: bytes = b"{}") -> int:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (OSError, http.client.HTTPException):  # its frontend was killed under it (--faults)
        return 0


class Churn(threading.Thread):
    """Load and unload `churn` in a loop; counts whole cycles and failures."""

    def __init__(self, base: str) -> None:
        super().__init__(daemon=True)
        self.base = base
        self.cycles = 0
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for action in ("load", "unload"):
                status = _post(f"{self.base}/v2/repository/models/churn/{action}")
                if status != 200:
                    self.failures.append(f"{action}: HTTP {status}")
            self.cycles += 1


class Faults(threading.Thread):
    """Every `every` seconds SIGKILL a python stub, then (if any) a frontend process, in turn."""

    def __init__(self, server: Server, every: float) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.every = every
        self.done: list[tuple[float, str]] = []
        self.stop = threading.Event()

    def _victims(self, marker: str) -> list[psutil.Process]:
        found = []
        for pid in self.server.pids():
            try:
                process = psutil.Process(pid)
                if marker in " ".join(process.cmdline()):
                    found.append(process)
            except psutil.Error:
                continue
        return found

    def run(self) -> None:
        markers = ["modelhost.backends.python.stub", "modelhost.frontends.process"]
        turn = 0
        while not self.stop.wait(self.every):
            marker = markers[turn % len(markers)]
            turn += 1
            victims = self._victims(marker)
            if victims:
                victims[0].send_signal(signal.SIGKILL)
                what = "a python stub" if "stub" in marker else "a frontend process"
                self.done.append((time.monotonic(), f"killed {what} ({victims[0].pid})"))


def _http(
    results: dict[str, loadgen.RunResult],
    server: Server,
    b: loadgen.Bodies,
    model: str,
    binary: bool,
    args: argparse.Namespace,
) -> None:
    results[model] = loadgen.run_wrk(
        f"{server.http_url}/v2/models/{model}/infer",
        b.binary_file if binary else b.json_file,
        b.binary_header_len if binary else None,
        args.concurrency,
        args.window,
        1,
    )


def _grpc(
    results: dict[str, loadgen.RunResult],
    server: Server,
    b: loadgen.Bodies,
    frame: int,
    args: argparse.Namespace,
) -> None:
    results["mlp"] = loadgen.run_h2load(
        server.grpc_target, b.grpc_frame_file, frame, args.concurrency, args.window, 8
    )


def rss_mib(server: Server) -> float:
    total = 0
    for pid in server.pids():
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            continue
    return total / 2**20


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    onnx_repo = build_modelhost_repo(work / "repo", ["simple", "mlp"])
    build_python_repo(work / "python", ["identity"])
    shutil.copytree(work / "python" / "identity", onnx_repo / "identity")
    # The churned model is a python one: each load starts stub processes and shared memory, each unload ends them.
    shutil.copytree(onnx_repo / "identity", onnx_repo / "churn")
    config = onnx_repo / "churn" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "identity"', 'name: "churn"'))
    workloads = {m: payloads.make_workload(m) for m in ("simple", "mlp", "identity")}
    bodies = {
        m: loadgen.write_bodies(
            work / "bodies", m, payloads.binary_body(w), payloads.json_body(w), payloads.grpc_request(w)
        )
        for m, w in workloads.items()
    }
    ports = Ports.pick()
    extra = [
        "--model-control-mode=explicit",
        "--load-model=simple",
        "--load-model=mlp",
        "--load-model=identity",
        f"--frontend-processes={args.frontend_processes}",
    ]
    cmd = server_command("modelhost", onnx_repo, ports, args.modelhost_cmd, extra)
    server = Server("soak", cmd, ports, work / "server.log")
    shm_before = set(os.listdir("/dev/shm"))
    windows: list[Window] = []
    with server:
        assert server.proc is not None
        engine_pid = server.proc.pid  # the stubs' shared memory, and their command lines, carry it
        server.wait_ready(["simple", "mlp", "identity"])
        mlp_frame = 5 + payloads.check_grpc(server.host, ports.grpc, workloads["mlp"])
        churn = Churn(server.http_url) if args.churn else None
        faults = Faults(server, args.fault_every) if args.faults else None
        for thread in (churn, faults):
            if thread is not None:
                thread.start()
        started = time.monotonic()
        index = 0
        while time.monotonic() - started < args.minutes * 60:
            window = Window(index, time.monotonic() - started)
            results: dict[str, loadgen.RunResult] = {}

            threads = [
                threading.Thread(
                    target=_http, args=(results, server, bodies["simple"], "simple", True, args)
                ),
                threading.Thread(target=_grpc, args=(results, server, bodies["mlp"], mlp_frame, args)),
                threading.Thread(
                    target=_http, args=(results, server, bodies["identity"], "identity", False, args)
                ),
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            window.loads = {
                model: {"requests": r.requests, "errors": r.errors, "rps": r.rps, "p99_ms": r.lat_p99_ms}
                for model, r in results.items()
            }
            window.rss_mib = rss_mib(server)
            if faults is not None:
                window.faults = [what for at, what in faults.done if at - started >= window.started_s]
                faults.done = [(at, what) for at, what in faults.done if at - started < window.started_s]
            window.churn_cycles = churn.cycles if churn is not None else 0
            windows.append(window)
            print(
                f"window {index:3d} at {window.started_s:6.0f} s: "
                + ", ".join(
                    f"{m} {v['rps']:.0f}/s p99 {v['p99_ms']:.1f} ms err {v['errors']}"
                    for m, v in window.loads.items()
                )
                + f"; RSS {window.rss_mib:.0f} MiB; churn {window.churn_cycles}; "
                + (", ".join(window.faults) or "no fault"),
                flush=True,
            )
            index += 1
        for thread in (churn, faults):
            if thread is not None:
                thread.stop.set()
                thread.join(120)
    time.sleep(2)
    shm_left = sorted(set(os.listdir("/dev/shm")) - shm_before)
    stubs_running = 0  # python stubs of this run's models that outlived the server
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or ())
        if "modelhost.backends.python.stub" in cmdline and f"modelhost_python_{engine_pid}_" in cmdline:
            stubs_running += 1
    return summarize(args, windows, churn, stubs_running, shm_left)


def summarize(
    args: argparse.Namespace, windows: list[Window], churn: Churn | None, stubs: int, shm_left: list[str]
) -> dict[str, Any]:
    warm = windows[1:] if len(windows) > 2 else windows
    per_window = max(1, round(300 / args.window))  # windows in five minutes
    first, last = warm[:per_window], warm[-per_window:]

    def p99(ws: list[Window]) -> float:
        return statistics.median(max(v["p99_ms"] for v in w.loads.values()) for w in ws)

    errors = sum(v["errors"] for w in windows for v in w.loads.values())
    quiet_errors = sum(v["errors"] for w in windows if not w.faults for v in w.loads.values())
    summary = {
        "minutes": args.minutes,
        "windows": len(windows),
        "requests": sum(v["requests"] for w in windows for v in w.loads.values()),
        "errors": errors,
        "errors_in_windows_without_faults": quiet_errors,
        # RSS swings by the churn model's size (loaded or not at the sample), so one sample against another says
        # little: the medians and the peaks of the first and last five minutes are compared.
        "rss_first_5min_median_mib": statistics.median(w.rss_mib for w in first),
        "rss_last_5min_median_mib": statistics.median(w.rss_mib for w in last),
        "rss_change": statistics.median(w.rss_mib for w in last) / statistics.median(w.rss_mib for w in first) - 1,
        "rss_first_5min_peak_mib": max(w.rss_mib for w in first),
        "rss_last_5min_peak_mib": max(w.rss_mib for w in last),
        "rss_first_mib": warm[0].rss_mib,
        "rss_last_mib": warm[-1].rss_mib,
        "p99_first_5min_ms": p99(first),
        "p99_last_5min_ms": p99(last),
        "p99_ratio": p99(last) / p99(first),
        "churn_cycles": churn.cycles if churn is not None else 0,
        "churn_failures": churn.failures[:10] if churn is not None else [],
        "stubs_left_after_stop": stubs,
        "shm_left_after_stop": shm_left,
        "faults": sum(len(w.faults) for w in windows),
        "per_window": [asdict(w) for w in windows],
    }
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--window", type=int, default=30, help="seconds per load window")
    parser.add_argument("--concurrency", type=int, default=64, help="per load")
    parser.add_argument("--frontend-processes", type=int, default=2)
    parser.add_argument("--fault-every", type=float, default=30)
    parser.add_argument("--no-churn", dest="churn", action="store_false")
    parser.add_argument("--no-faults", dest="faults", action="store_false")
    parser.add_argument("--modelhost-cmd", default=".venv/bin/python -m modelhost")
    parser.add_argument("--workdir", default="/tmp/modelhost-soak")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    summary = run(args)
    brief = {k: v for k, v in summary.items() if k != "per_window"}
    print(json.dumps(brief, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
