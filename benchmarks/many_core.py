"""How modelhost scales with its frontend processes on a machine with many cores: one server per
`--frontend-processes` mode (0, 1, 2, 4, 8 and `auto` by default), each loaded at one concurrency (256) with wrk
over HTTP (KServe binary) and h2load over gRPC, on a trivial model (`simple`, INT32 add/sub) and on the bundled
MLP. Reports req/s, p50/p99 latency, and the CPU each process of the server used during each run (the engine,
every frontend, python-backend stubs) and the load generator's; this is how `--frontend-processes=auto` gets
measured (`modelhost.options.auto_frontend_processes`).

Run by scripts/gpu_check.sh on the 16-core GPU machine; by hand anywhere:

    .venv/bin/python benchmarks/many_core.py --json /tmp/scaling.json
    .venv/bin/python benchmarks/many_core.py --modes 0,2 --duration 3 --concurrency 64   # a quick look
    .venv/bin/python benchmarks/many_core.py --dry-run                                      # the plan only

Every answer is checked once before a mode is loaded (payloads.check_http / check_grpc); a cell with errors says
so. `--deadline-s` stops starting modes that would not finish in time (they are reported as not run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import loadgen
import payloads
from reference_repo import build_modelhost_repo
from servers import _CLK_TCK, Ports, Server, server_command

MODES = ("0", "1", "2", "4", "8", "auto")
MODELS = ("simple", "mlp")
PROTOCOLS = ("http-binary", "grpc-h2load")


@dataclass
class Cell:
    """One run: a mode, a model and a protocol."""

    mode: str
    model: str
    protocol: str
    concurrency: int
    rps: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    errors: int = 0
    first_error: str = ""
    # CPU seconds per second of the run, by role: engine, frontends (all of them), stubs, client.
    cpu: dict[str, float] = field(default_factory=dict)
    frontends: int = 0  # frontend processes seen running
    # Each process of the server: role, pid, cores used (CPU seconds per second of the run).
    processes: list[dict[str, object]] = field(default_factory=list)


def roles(server: Server) -> dict[int, tuple[str, int]]:
    """pid -> (role, user+system clock ticks) of the server's live processes."""
    procs = server._processes()
    found: dict[int, tuple[str, int]] = {}
    for pid in server._pids(procs):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if server.proc is not None and pid == server.proc.pid:
            role = "engine"
        elif "modelhost.frontends.process" in cmdline:
            role = "frontends"
        elif "modelhost.backends.python.stub" in cmdline:
            role = "stubs"
        else:
            role = "other"
        found[pid] = (role, procs[pid][2])
    return found


def cpu_between(
    before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]], seconds: float
) -> list[dict[str, object]]:
    """The cores each process used between two snapshots (a process that appeared counts from zero)."""
    used = []
    for pid, (role, ticks) in sorted(after.items()):
        start = before.get(pid, (role, 0))[1]
        used.append({"role": role, "pid": pid, "cores": round((ticks - start) / _CLK_TCK / seconds, 2)})
    return used


def by_role(processes: list[dict[str, object]]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for p in processes:
        role, cores = str(p["role"]), float(str(p["cores"]))
        totals[role] = round(totals.get(role, 0.0) + cores, 2)
    return dict(sorted(totals.items()))


def plan(args: argparse.Namespace) -> list[str]:
    lines = []
    for mode in args.modes:
        lines.append(f"modelhost serve --frontend-processes={mode}  (models: {', '.join(args.models)})")
        for model in args.models:
            for protocol in args.protocols:
                tool = "wrk" if protocol.startswith("http") else "h2load"
                lines.append(
                    f"  {tool}: {model} {protocol} c={args.concurrency} for {args.duration} s "
                    f"(+{args.warmup} s warm-up)"
                )
    return lines


def seconds_per_mode(args: argparse.Namespace) -> float:
    runs = len(args.models) * len(args.protocols)
    return 8.0 + runs * (args.duration + args.warmup + 1.0)


def run_mode(
    args: argparse.Namespace, mode: str, repo: Path, bodies: dict[str, loadgen.Bodies], workdir: Path
) -> list[Cell]:
    ports = Ports.pick()
    cmd = server_command("modelhost", repo, ports, args.modelhost_cmd, [f"--frontend-processes={mode}"])
    server = Server(f"modelhost-fp{mode}", cmd, ports, workdir / f"fp{mode}.log")
    cells: list[Cell] = []
    with server:
        server.wait_ready(list(args.models), timeout=120)
        frame_size: dict[str, int] = {}
        for model in args.models:
            workload = payloads.make_workload(model)
            payloads.check_http(server.host, ports.http, workload, binary=True)
            frame_size[model] = 5 + payloads.check_grpc(server.host, ports.grpc, workload)
        for model in args.models:
            for protocol in args.protocols:
                cell = Cell(mode, model, protocol, args.concurrency)
                try:
                    _load(args, server, bodies[model], frame_size[model], model, protocol, args.warmup)
                    before, started = roles(server), time.monotonic()
                    result = _load(
                        args, server, bodies[model], frame_size[model], model, protocol, args.duration
                    )
                    after = roles(server)
                    cell.processes = cpu_between(before, after, time.monotonic() - started)
                    cell.cpu = by_role(cell.processes)
                    cell.cpu["client"] = round(result.client_cpu_s / result.duration_s, 2)
                    cell.frontends = sum(1 for role, _ in after.values() if role == "frontends")
                    cell.rps, cell.errors, cell.first_error = (
                        round(result.rps, 1),
                        result.errors,
                        result.first_error,
                    )
                    cell.p50_ms, cell.p99_ms = round(result.lat_p50_ms, 2), round(result.lat_p99_ms, 2)
                except (RuntimeError, OSError, ValueError) as e:
                    cell.errors, cell.first_error = -1, f"{type(e).__name__}: {e}"[:300]
                cells.append(cell)
                print(_row(cell), flush=True)
    return cells


def _load(
    args: argparse.Namespace,
    server: Server,
    bodies: loadgen.Bodies,
    frame_size: int,
    model: str,
    protocol: str,
    duration: int,
) -> loadgen.RunResult:
    if protocol == "http-binary":
        url = f"{server.http_url}/v2/models/{model}/infer"
        return loadgen.run_wrk(
            url, bodies.binary_file, bodies.binary_header_len, args.concurrency, duration, args.wrk_threads
        )
    return loadgen.run_h2load(
        server.grpc_target,
        bodies.grpc_frame_file,
        frame_size,
        args.concurrency,
        duration,
        args.h2load_connections,
        args.h2load_threads,
    )


HEADER = (
    "| fp | model | protocol | req/s | p50 ms | p99 ms | engine | frontends (n) | stubs | client | errors |"
)


def _row(cell: Cell) -> str:
    cpu = cell.cpu
    frontends = f"{cpu.get('frontends', 0.0):.2f} ({cell.frontends})"
    errors = str(cell.errors) + (f": {cell.first_error[:80]}" if cell.first_error else "")
    return (
        f"| {cell.mode} | {cell.model} | {cell.protocol} | {cell.rps:,.0f} | {cell.p50_ms:.2f} | {cell.p99_ms:.2f} | "
        f"{cpu.get('engine', 0.0):.2f} | {frontends} | {cpu.get('stubs', 0.0):.2f} | {cpu.get('client', 0.0):.2f} | "
        f"{errors} |"
    )


def table(cells: list[Cell]) -> str:
    """The markdown table of the cells (CPU columns: cores used during the run)."""
    return "\n".join([HEADER, "|" + "---|" * (HEADER.count("|") - 1), *(_row(c) for c in cells)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--modes", default=",".join(MODES), help="--frontend-processes values (default: %(default)s)"
    )
    parser.add_argument("--models", default=",".join(MODELS), help="bundled models (default: %(default)s)")
    parser.add_argument("--protocols", default=",".join(PROTOCOLS), help="default: %(default)s")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--duration", type=int, default=5, help="seconds per run (default: %(default)s)")
    parser.add_argument(
        "--warmup", type=int, default=1, help="seconds before each run (default: %(default)s)"
    )
    parser.add_argument("--wrk-threads", type=int, default=4)
    parser.add_argument("--h2load-threads", type=int, default=4)
    parser.add_argument("--h2load-connections", type=int, default=16)
    parser.add_argument("--modelhost-cmd", default=f"{sys.executable} -m modelhost")
    parser.add_argument(
        "--deadline-s", type=float, default=0.0, help="start no mode that would end after this"
    )
    parser.add_argument("--json", type=Path, help="write the cells here")
    parser.add_argument("--dry-run", action="store_true", help="print what would run, and exit")
    args = parser.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    args.protocols = [p.strip() for p in args.protocols.split(",") if p.strip()]
    if args.dry_run:
        print("\n".join(plan(args)))
        print(f"about {seconds_per_mode(args) * len(args.modes):.0f} s")
        return 0
    loadgen.require_tools(args.protocols)
    started = time.monotonic()
    cells: list[Cell] = []
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="many-core-") as tmp:
        workdir = Path(tmp)
        repo = build_modelhost_repo(workdir / "repo", list(args.models))
        bodies = {}
        for model in args.models:
            w = payloads.make_workload(model)
            bodies[model] = loadgen.write_bodies(
                workdir / "bodies",
                model,
                payloads.binary_body(w),
                payloads.json_body(w),
                payloads.grpc_request(w),
            )
        print(f"cores: {os.cpu_count()}, concurrency {args.concurrency}\n{table([])}", flush=True)
        for mode in args.modes:
            if args.deadline_s and time.monotonic() - started + seconds_per_mode(args) > args.deadline_s:
                skipped.append(mode)
                continue
            try:
                cells += run_mode(args, mode, repo, bodies, workdir)
            except (RuntimeError, TimeoutError, payloads.CheckError) as e:
                cells.append(Cell(mode, "*", "*", args.concurrency, errors=-1, first_error=str(e)[-300:]))
                print(_row(cells[-1]), flush=True)
    if skipped:
        print(f"not run (time): --frontend-processes {', '.join(skipped)}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "cores": os.cpu_count(),
                    "concurrency": args.concurrency,
                    "duration_s": args.duration,
                    "cells": [asdict(c) for c in cells],
                    "not_run": skipped,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
