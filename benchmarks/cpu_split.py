"""Where a request's server CPU goes with --frontend-processes=N: engine, frontends, python-backend stubs.

Starts modelhost on an example model (or a python-backend model.py with --python-backend), drives it with wrk
(HTTP, closed loop, binary tensors) or h2load (gRPC ModelInfer, 8 connections) and reads each process's CPU time
from /proc before and after, then prints the CPU per request of each role. With --profile it also samples the
engine and one frontend with py-spy and prints the share of the transport (framing, messages, the link's two
ends) in each.

    .venv/bin/python benchmarks/cpu_split.py --model identity --python-backend --frontends 0,1,2 --concurrency 64
    .venv/bin/python benchmarks/cpu_split.py --model identity --python-backend --protocol grpc --frontends 0,1
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from loadgen import RunResult, run_h2load, run_wrk, write_bodies
from payloads import binary_body, check_grpc, grpc_request, json_body, make_workload
from reference_repo import build_modelhost_repo, build_python_repo
from servers import Ports, server_command

TICK = os.sysconf("SC_CLK_TCK")
TRANSPORT = ("transport/",)
PY_SPY = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _descendants(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found.append(int(child))
            found += _descendants(int(child))
    return found


def _role(pid: int, engine: int) -> str:
    if pid == engine:
        return "engine"
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    if b"modelhost.frontends.process" in cmdline:
        return "frontends"
    return "python stubs" if b"backends.python" in cmdline or b"stub" in cmdline else "other children"


def _transport_share(raw: Path) -> tuple[float, int]:
    """The share of busy samples spent in the transport's own code (the innermost modelhost frame of the sample
    is a transport module), and the number of samples."""
    total = inside = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        total += int(count)
        ours = [frame for frame in stack.split(";") if "modelhost/" in frame]
        if ours and any(part in ours[-1] for part in TRANSPORT):
            inside += int(count)
    return (inside / total if total else 0.0), total


def measure(args: argparse.Namespace, frontends: int, repo: Path, bodies_dir: Path) -> None:
    workload = make_workload(args.model, args.batch_size)
    bodies = write_bodies(
        bodies_dir, args.model, binary_body(workload), json_body(workload), grpc_request(workload)
    )
    ports = Ports.pick()
    command = server_command("modelhost", repo, ports, extra_args=[f"--frontend-processes={frontends}"])
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{ports.http}/v2/models/{args.model}/infer"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                run_wrk(url, bodies.binary_file, bodies.binary_header_len, 1, 1, 1)
                break
            except RuntimeError:
                time.sleep(0.3)
        grpc_target = f"127.0.0.1:{ports.grpc}"
        frame_size = 5 + check_grpc("127.0.0.1", ports.grpc, workload) if args.protocol == "grpc" else 0

        def load(duration: int) -> RunResult:
            if args.protocol == "grpc":
                return run_h2load(
                    grpc_target, bodies.grpc_frame_file, frame_size, args.concurrency, duration, 8
                )
            return run_wrk(url, bodies.binary_file, bodies.binary_header_len, args.concurrency, duration, 1)

        load(2)  # warm up
        pids = [server.pid, *_descendants(server.pid)]
        before = {pid: _cpu_s(pid) for pid in pids}
        profiles = []
        if args.profile:
            targets = [("engine", server.pid)]
            targets += [("frontend", p) for p in pids if _role(p, server.pid) == "frontends"][:1]
            for name, pid in targets:
                out = Path(tempfile.mkdtemp()) / f"{name}.txt"
                profiles.append((name, out))
                subprocess.Popen(
                    [PY_SPY, "record", "-p", str(pid), "-d", str(args.duration - 1), "-r", "100", "-f", "raw",
                     "-o", str(out), "--nonblocking"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
        result = load(args.duration)
        after = {pid: _cpu_s(pid) for pid in pids if Path(f"/proc/{pid}").exists()}
        requests = result.rps * result.duration_s
        by_role: dict[str, float] = {}
        for pid, cpu in after.items():
            role = _role(pid, server.pid)
            by_role[role] = by_role.get(role, 0.0) + cpu - before[pid]
        total = sum(by_role.values())
        parts = ", ".join(f"{role} {1e6 * cpu / requests:.0f}" for role, cpu in sorted(by_role.items()))
        print(
            f"{args.protocol} frontends={frontends} {args.model} c={args.concurrency}: {result.rps:,.0f} req/s, p99 "
            f"{result.lat_p99_ms:.1f} ms; server CPU per request {1e6 * total / requests:.0f} us ({parts}); "
            f"load generator {1e6 * result.client_cpu_s / requests:.0f} us"
        )
        time.sleep(1.5)
        for name, out in profiles:
            if out.exists():
                share, samples = _transport_share(out)
                print(f"  {name}: transport {100 * share:.0f}% of {samples} busy samples")
    finally:
        server.terminate()
        server.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="simple")
    parser.add_argument("--python-backend", action="store_true")
    parser.add_argument("--frontends", default="0,1,2")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--duration", type=int, default=6)
    parser.add_argument("--profile", action="store_true", help="also sample with py-spy (pip install py-spy)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.python_backend:
            repo = build_python_repo(Path(tmp) / "repo", [args.model])
        else:
            repo = build_modelhost_repo(Path(tmp) / "repo", [args.model])
        for frontends in (int(n) for n in args.frontends.split(",")):
            measure(args, frontends, repo, Path(tmp) / "bodies")


if __name__ == "__main__":
    main()
