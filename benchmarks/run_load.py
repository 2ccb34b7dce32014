#!/usr/bin/env python3
"""Closed-loop load benchmark: modelhost serving the example ONNX models against the reference tritonserver
serving the same ONNX files through a python-backend ``model.py`` that calls onnxruntime.

For each repeat, each server in turn (A B A B ...) is started on free ports, waited for, checked (one
request per model and protocol must give onnxruntime's answer), warmed up, loaded at each concurrency with
each protocol, and stopped.  The table gives medians over the repeats and the ratio modelhost/reference of
the median throughputs, both measured in this run.  A JSON file with every run goes to benchmarks/results/.

    .venv/bin/python benchmarks/run_load.py                               # everything, ~25 minutes
    .venv/bin/python benchmarks/run_load.py --server reference --duration 3 --repeats 1
    .venv/bin/python benchmarks/run_load.py --model mlp --concurrency 8,64 --protocols http-binary,grpc-h2load
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import loadgen  # noqa: E402
import payloads  # noqa: E402
from reference_repo import build_modelhost_repo, build_python_repo, build_reference_repo  # noqa: E402
from servers import DEFAULT_MODELHOST_CMD, Ports, Server, server_command  # noqa: E402

SERVERS = ("modelhost", "reference")
DEFAULT_PROTOCOLS = "http-binary,http-json,grpc"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default="both", help="modelhost | reference | both (default both)")
    p.add_argument("--model", default="both", help="simple | mlp | both, or a comma list (default both)")
    p.add_argument(
        "--concurrency", default="1,8,64", help="comma list of in-flight requests (default 1,8,64)"
    )
    p.add_argument("--duration", type=int, default=10, help="seconds per measurement (default 10)")
    p.add_argument("--repeats", type=int, default=3, help="repetitions per server, alternating (default 3)")
    p.add_argument(
        "--protocols",
        default=DEFAULT_PROTOCOLS,
        help=f"comma list of {', '.join(loadgen.PROTOCOLS)} (default {DEFAULT_PROTOCOLS})",
    )
    p.add_argument("--batch-size", type=int, default=1, help="rows per request (default 1)")
    p.add_argument(
        "--dynamic-batching-us",
        type=int,
        default=None,
        help="add dynamic_batching { max_queue_delay_microseconds: N } to every model, on both servers",
    )
    p.add_argument(
        "--warmup", type=int, default=2, help="seconds of warm-up per model and protocol (default 2)"
    )
    p.add_argument("--wrk-threads", type=int, default=1, help="wrk threads (default 1)")
    p.add_argument("--grpc-processes", type=int, default=2, help="processes of the Python gRPC generator")
    p.add_argument("--h2load-connections", type=int, default=2, help="HTTP/2 connections of grpc-h2load")
    p.add_argument(
        "--python-backend",
        action="store_true",
        help="both servers serve the same python-backend model.py files (models identity and mlp)",
    )
    p.add_argument("--modelhost-cmd", default=DEFAULT_MODELHOST_CMD, help="command that runs modelhost")
    p.add_argument("--output", type=Path, default=None, help="results JSON (default benchmarks/results/...)")
    args = p.parse_args(argv)
    args.servers = list(SERVERS) if args.server == "both" else args.server.split(",")
    known = payloads.PYTHON_MODELS if args.python_backend else payloads.MODELS
    args.models = list(known) if args.model == "both" else args.model.split(",")
    args.concurrencies = [int(c) for c in args.concurrency.split(",") if c]
    args.protocol_list = [x for x in args.protocols.split(",") if x]
    for s in args.servers:
        if s not in SERVERS:
            p.error(f"unknown server {s!r}")
    for m in args.models:
        if m not in known:
            p.error(f"unknown model {m!r}")
    for x in args.protocol_list:
        if x not in loadgen.PROTOCOLS:
            p.error(f"unknown protocol {x!r}")
    return args


# ----------------------------------------------------------------------------------------------------------
# One server session
# ----------------------------------------------------------------------------------------------------------


class Session:
    def __init__(self, args: argparse.Namespace, bodies: dict[str, loadgen.Bodies], server: Server) -> None:
        self.args = args
        self.bodies = bodies
        self.server = server
        self.frame_size: dict[str, int] = {}

    def check(self, workloads: dict[str, payloads.Workload]) -> None:
        s = self.server
        for model, w in workloads.items():
            for proto in self.args.protocol_list:
                if proto in ("http-binary", "http-json"):
                    payloads.check_http(s.host, s.ports.http, w, binary=proto == "http-binary")
                elif model not in self.frame_size:
                    self.frame_size[model] = 5 + payloads.check_grpc(s.host, s.ports.grpc, w)

    def load(self, model: str, proto: str, concurrency: int, duration: int) -> loadgen.RunResult:
        s, b, a = self.server, self.bodies[model], self.args
        url = f"{s.http_url}/v2/models/{model}/infer"
        cpu0 = s.cpu_seconds()
        if proto == "http-binary":
            r = loadgen.run_wrk(url, b.binary_file, b.binary_header_len, concurrency, duration, a.wrk_threads)
        elif proto == "http-json":
            r = loadgen.run_wrk(url, b.json_file, None, concurrency, duration, a.wrk_threads)
        elif proto == "grpc":
            r = loadgen.run_grpc_python(
                s.grpc_target, b.grpc_request, concurrency, duration, a.grpc_processes
            )
        elif proto == "grpc-h2load":
            r = loadgen.run_h2load(
                s.grpc_target,
                b.grpc_frame_file,
                self.frame_size[model],
                concurrency,
                duration,
                a.h2load_connections,
            )
        else:
            raise ValueError(proto)
        r.server_cpu_s = s.cpu_seconds() - cpu0
        return r


def run_all(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    workloads = {m: payloads.make_workload(m, args.batch_size) for m in args.models}
    bodies = {
        m: loadgen.write_bodies(
            workdir / "bodies", m, payloads.binary_body(w), payloads.json_body(w), payloads.grpc_request(w)
        )
        for m, w in workloads.items()
    }
    if args.python_backend:
        python_repo = build_python_repo(workdir / "repo-python", args.models, args.dynamic_batching_us)
        repos = {"modelhost": python_repo, "reference": python_repo}
    else:
        repos = {
            "modelhost": build_modelhost_repo(
                workdir / "repo-modelhost", args.models, dynamic_batching_us=args.dynamic_batching_us
            ),
            "reference": build_reference_repo(
                workdir / "repo-reference", args.models, dynamic_batching_us=args.dynamic_batching_us
            ),
        }
    runs: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    configs: dict[str, dict[str, Any]] = {}
    commands: dict[str, list[str]] = {}
    max_c = max(args.concurrencies)

    for rep in range(args.repeats):
        for name in args.servers:
            if name in failures:
                continue
            ports = Ports.pick()
            cmd = server_command(name, repos[name], ports, args.modelhost_cmd)
            commands[name] = cmd
            server = Server(name, cmd, ports, workdir / "logs" / f"{name}-{rep}.log")
            log(f"repeat {rep + 1}/{args.repeats}: starting {name}: {' '.join(cmd)}")
            try:
                with server:
                    t0 = time.monotonic()
                    server.wait_ready(args.models)
                    log(f"{name} ready in {time.monotonic() - t0:.1f}s")
                    session = Session(args, bodies, server)
                    session.check(workloads)
                    if name not in configs:
                        configs[name] = {m: server.model_config(m) for m in args.models}
                    for model in args.models:
                        for proto in args.protocol_list:
                            if args.warmup > 0:
                                session.load(model, proto, max_c, args.warmup)
                    for model in args.models:
                        for proto in args.protocol_list:
                            for c in args.concurrencies:
                                r = session.load(model, proto, c, args.duration)
                                row = {"repeat": rep, "server": name, "model": model, "protocol": proto}
                                row |= {"concurrency": c, **r.as_dict()}
                                runs.append(row)
                                err = f"  ERRORS {r.errors}: {r.first_error}" if r.errors else ""
                                log(
                                    f"  {name:9} {model:6} {proto:11} c={c:<3} {r.rps:9.1f} req/s "
                                    f"p50 {r.lat_p50_ms:7.2f} ms p99 {r.lat_p99_ms:7.2f} ms{err}"
                                )
            except (RuntimeError, TimeoutError, OSError, payloads.CheckError) as e:
                failures[name] = f"{type(e).__name__}: {e}"
                log(f"{name} FAILED, skipped from now on: {failures[name]}\n{server.log_tail()}")
    return {"runs": runs, "failures": failures, "configs": configs, "commands": commands}


# ----------------------------------------------------------------------------------------------------------
# Summary
# ----------------------------------------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def summarize(runs: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for model in args.models:
        for proto in args.protocol_list:
            for c in args.concurrencies:
                row: dict[str, Any] = {"model": model, "protocol": proto, "concurrency": c}
                for name in args.servers:
                    mine = [
                        r
                        for r in runs
                        if (r["server"], r["model"], r["protocol"], r["concurrency"])
                        == (name, model, proto, c)
                    ]
                    if not mine:
                        continue
                    cpu_us = [1e6 * r["server_cpu_s"] / r["requests"] for r in mine if r["requests"]]
                    row[name] = {
                        "repeats": len(mine),
                        "rps": _median([r["rps"] for r in mine]),
                        "rps_all": [round(r["rps"], 1) for r in mine],
                        "lat_p50_ms": _median([r["lat_p50_ms"] for r in mine]),
                        "lat_p99_ms": _median([r["lat_p99_ms"] for r in mine]),
                        "server_cpu_us_per_req": _median(cpu_us),
                        "errors": sum(r["errors"] for r in mine),
                    }
                if "modelhost" in row and "reference" in row:
                    mh, ref = row["modelhost"], row["reference"]
                    row["ratio"] = mh["rps"] / ref["rps"] if ref["rps"] else math.nan
                    pairs = [
                        (a["rps"], b["rps"])
                        for a in runs
                        for b in runs
                        if a["repeat"] == b["repeat"]
                        and a["server"] == "modelhost"
                        and b["server"] == "reference"
                        and (a["model"], a["protocol"], a["concurrency"]) == (model, proto, c)
                        and (b["model"], b["protocol"], b["concurrency"]) == (model, proto, c)
                    ]
                    row["pair_ratios"] = [round(x / y, 3) for x, y in pairs if y]
                rows.append(row)
    return rows


def format_table(rows: list[dict[str, Any]], servers: list[str]) -> str:
    head = f"{'model':6} {'protocol':11} {'conc':>4}"
    for name in servers:
        head += f" | {name + ' req/s':>15} {'p50 ms':>7} {'p99 ms':>7} {'cpu us/req':>10}"
    both = all(s in servers for s in SERVERS)
    if both:
        head += f" | {'mh/ref':>6}"
    lines = [head, "-" * len(head)]
    for row in rows:
        line = f"{row['model']:6} {row['protocol']:11} {row['concurrency']:>4}"
        for name in servers:
            s = row.get(name)
            if s is None:
                line += f" | {'-':>15} {'-':>7} {'-':>7} {'-':>10}"
                continue
            flag = "!" if s["errors"] else " "
            line += (
                f" | {s['rps']:14.1f}{flag} {s['lat_p50_ms']:7.2f} {s['lat_p99_ms']:7.2f}"
                f" {s['server_cpu_us_per_req']:10.0f}"
            )
        if both:
            ratio = row.get("ratio")
            line += f" | {ratio:6.2f}" if ratio is not None else f" | {'-':>6}"
        lines.append(line)
    if any(row.get(n, {}).get("errors") for row in rows for n in servers):
        lines.append("! = some requests failed in that cell: those measurements are INVALID (see the JSON)")
    return "\n".join(lines)


def _version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
        return (out.stdout or out.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "?"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    loadgen.require_tools(args.protocol_list)
    started = dt.datetime.now()
    meta: dict[str, Any] = {
        "started": started.isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "loadavg_before": os.getloadavg(),
        "python": sys.version.split()[0],
        "wrk": _version(["wrk", "--version"]) if shutil.which("wrk") else None,
        "h2load": _version(["h2load", "--version"]) if shutil.which("h2load") else None,
        "args": {k: v for k, v in vars(args).items() if k != "output"},
    }
    with tempfile.TemporaryDirectory(prefix="modelhost-bench-") as tmp:
        result = run_all(args, Path(tmp))
    meta["loadavg_after"] = os.getloadavg()
    meta["minutes"] = round((dt.datetime.now() - started).total_seconds() / 60, 1)
    summary = summarize(result["runs"], args)
    table = format_table(summary, [s for s in args.servers if any(r["server"] == s for r in result["runs"])])
    out = args.output or HERE / "results" / f"load-{started:%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, **result, "summary": summary, "table": table}, indent=1) + "\n")
    print()
    print(
        f"closed-loop load, batch {args.batch_size}, {args.duration}s x {args.repeats} repeats, medians; "
        f"cpu us/req = server CPU time per request; mh/ref = ratio of median req/s"
    )
    print(table)
    for name, why in result["failures"].items():
        print(f"\n{name} FAILED: {why}")
    print(f"\nresults: {out}")
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
