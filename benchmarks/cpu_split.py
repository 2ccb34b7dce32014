"""Where a request's server CPU goes with --frontend-processes=N: engine, frontends, python-backend stubs.

Starts modelhost on an example model (or a python-backend model.py with --python-backend), drives it with wrk
(HTTP, closed loop, binary tensors) or h2load (gRPC ModelInfer, 8 connections) and reads each process's CPU time
from /proc before and after, then prints the CPU per request of each role. With --profile it also samples the
engine and one frontend with py-spy and prints the share of the transport (framing, messages, the link's two
ends) in each.

    .venv/bin/python benchmarks/cpu_split.py --model identity --python-backend --frontends 0,1,2 --concurrency 64
    .venv/bin/python benchmarks/cpu_split.py --model identity --python-backend --protocol grpc --frontends 0,1

With --table it measures the per-layer budget of issue 33 in one command instead: HTTP JSON, HTTP binary and gRPC,
on identity (a python model.py) and the MLP (ONNX here, a python model.py running onnxruntime on the reference),
at --concurrency (64) with dynamic batching, one frontend mode (0): modelhost's server CPU per request split
into layers (py-spy samples of the engine process, benchmarks/layers.py) plus the python stubs' own CPU; the
reference tritonserver's total on the same models and load; and the floor, a bare httptools + uvloop server
answering the same identity request (benchmarks/echo_floor.py; HTTP only). Needs py-spy (pip install py-spy).

    .venv/bin/python benchmarks/cpu_split.py --table --duration 8
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from layers import LAYERS, layer_shares
from loadgen import Bodies, RunResult, run_h2load, run_wrk, write_bodies
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
    server = _Load(command, ports.http, ports.grpc, bodies_dir)
    try:
        server.wait(args.model, bodies)
        protocol = "grpc" if args.protocol == "grpc" else "http-binary"
        frame_size = 5 + check_grpc("127.0.0.1", ports.grpc, workload) if protocol == "grpc" else 0
        server.run(args.model, protocol, bodies, frame_size, args.concurrency, 2)  # warm up
        pids = [server.process.pid, *_descendants(server.process.pid)]
        before = _tree_cpu(pids)
        profiles = []
        if args.profile:
            targets = [("engine", server.process.pid)]
            targets += [("frontend", p) for p in pids if _role(p, server.process.pid) == "frontends"][:1]
            for name, pid in targets:
                out = Path(tempfile.mkdtemp()) / f"{name}.txt"
                profiles.append((name, out))
                subprocess.Popen(
                    [PY_SPY, "record", "-p", str(pid), "-d", str(args.duration - 1), "-r", "100", "-f", "raw",
                     "-o", str(out), "--nonblocking"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
        result = server.run(args.model, protocol, bodies, frame_size, args.concurrency, args.duration)
        after = _tree_cpu(pids)
        requests = result.rps * result.duration_s
        by_role: dict[str, float] = {}
        for pid, cpu in after.items():
            role = _role(pid, server.process.pid)
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
        server.stop()


# --table: (model, protocol) in the order of the table.
TABLE_WORKLOADS = tuple((m, p) for m in ("identity", "mlp") for p in ("http-json", "http-binary", "grpc"))
ECHO_FLOOR = Path(__file__).parent / "echo_floor.py"


def _tree_cpu(pids: list[int]) -> dict[int, float]:
    return {pid: _cpu_s(pid) for pid in pids if Path(f"/proc/{pid}").exists()}


@dataclass
class Measured:
    result: RunResult
    roles: dict[str, float]  # CPU us per request by process role
    shares: dict[str, float]  # each layer's share of the engine's py-spy samples (empty when not profiled)


class _Load:
    """One server process under a load generator: start, wait until it answers, measure CPU per request."""

    def __init__(self, command: list[str], http: int, grpc: int, workdir: Path) -> None:
        """`workdir`: where py-spy's profiles go."""
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.http, self.grpc, self.workdir = http, grpc, workdir

    def run(
        self, model: str, protocol: str, bodies: Bodies, frame_size: int, concurrency: int, duration: int
    ) -> RunResult:
        if protocol == "grpc":
            return run_h2load(
                f"127.0.0.1:{self.grpc}", bodies.grpc_frame_file, frame_size, concurrency, duration, 8
            )
        binary = protocol == "http-binary"
        return run_wrk(
            f"http://127.0.0.1:{self.http}/v2/models/{model}/infer",
            bodies.binary_file if binary else bodies.json_file,
            bodies.binary_header_len if binary else None,
            concurrency,
            duration,
            1,
        )

    def wait(self, model: str, bodies: Bodies) -> None:
        deadline = time.monotonic() + 120
        while True:
            try:
                self.run(model, "http-binary", bodies, 0, 1, 1)
                return
            except RuntimeError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise
                time.sleep(0.5)

    def measure(
        self,
        model: str,
        protocol: str,
        bodies: Bodies,
        frame_size: int,
        args: argparse.Namespace,
        profile: bool,
    ) -> Measured:
        self.run(model, protocol, bodies, frame_size, args.concurrency, 2)  # warm up
        pids = [self.process.pid, *_descendants(self.process.pid)]
        before = _tree_cpu(pids)
        out = self.workdir / f"engine-{model}-{protocol}.txt"
        if profile:
            subprocess.Popen(
                [PY_SPY, "record", "-p", str(self.process.pid), "-d", str(args.duration - 1), "-r", "200", "-f",
                 "raw", "-o", str(out), "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        result = self.run(model, protocol, bodies, frame_size, args.concurrency, args.duration)
        after = _tree_cpu(pids)
        requests = max(1.0, result.rps * result.duration_s)
        roles: dict[str, float] = {}
        for pid, cpu in after.items():
            role = _role(pid, self.process.pid)
            roles[role] = roles.get(role, 0.0) + 1e6 * (cpu - before[pid]) / requests
        shares: dict[str, float] = {}
        if profile:
            time.sleep(2.0)  # py-spy writes its file when its duration is over
            if out.exists():
                shares, _ = layer_shares(out)
        return Measured(result, roles, shares)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()


def table(args: argparse.Namespace) -> None:
    """The per-layer budget (issue 33): a markdown table on stdout."""
    with tempfile.TemporaryDirectory() as tmp:
        ours = build_python_repo(Path(tmp) / "ours", ["identity"], dynamic_batching_us=args.batching_us)
        build_modelhost_repo(ours, ["mlp"], dynamic_batching_us=args.batching_us)
        theirs = build_python_repo(Path(tmp) / "reference", ["identity", "mlp"], args.batching_us)
        bodies: dict[str, Bodies] = {}
        frames: dict[str, int] = {}
        for model in ("identity", "mlp"):
            w = make_workload(model)
            bodies[model] = write_bodies(
                Path(tmp) / "bodies", model, binary_body(w), json_body(w), grpc_request(w)
            )
        rows: dict[tuple[str, str], dict[str, Measured]] = {}
        for kind, repo in (("modelhost", ours), ("reference", theirs)):
            ports = Ports.pick()
            extra = ["--frontend-processes=0"] if kind == "modelhost" else []
            server = _Load(
                server_command(kind, repo, ports, extra_args=extra), ports.http, ports.grpc, Path(tmp)
            )
            try:
                server.wait("identity", bodies["identity"])
                for model in ("identity", "mlp"):
                    frames[model] = 5 + check_grpc("127.0.0.1", ports.grpc, make_workload(model))
                for model, protocol in TABLE_WORKLOADS:
                    measured = server.measure(
                        model, protocol, bodies[model], frames[model], args, profile=kind == "modelhost"
                    )
                    rows.setdefault((model, protocol), {})[kind] = measured
                    print(f"# {kind} {model} {protocol}: {measured.result.rps:,.0f} req/s, "
                          f"{sum(measured.roles.values()):.0f} us/req", file=sys.stderr, flush=True)  # fmt: skip
            finally:
                server.stop()
        port = Ports.pick().http
        floor = _Load([sys.executable, str(ECHO_FLOOR), "--port", str(port)], port, 0, Path(tmp))
        try:
            floor.wait("identity", bodies["identity"])
            for protocol in ("http-json", "http-binary"):
                rows[("identity", protocol)]["floor"] = floor.measure(
                    "identity", protocol, bodies["identity"], 0, args, profile=False
                )
        finally:
            floor.stop()
    shown = [
        layer
        for layer in LAYERS
        if any(row["modelhost"].shares.get(layer, 0) >= 0.005 for row in rows.values())
    ]
    print(
        f"\nc={args.concurrency}, dynamic batching {args.batching_us} us, {args.duration} s each, fp0; server CPU "
        "us per request (process tree); layers: the engine process's share of py-spy samples"
    )
    head = [
        "workload",
        "req/s",
        "server us/req",
        *shown,
        "python stub",
        "reference req/s",
        "reference us/req",
    ]
    head += ["floor us/req", "ours / reference CPU"]
    print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for (model, protocol), row in rows.items():
        ours_m, ref_m = row["modelhost"], row["reference"]
        engine = ours_m.roles.get("engine", 0.0)
        total, ref_total = sum(ours_m.roles.values()), sum(ref_m.roles.values())
        floor_cell = f"{sum(row['floor'].roles.values()):.0f}" if "floor" in row else "-"
        stub = ours_m.roles.get("python stubs", 0.0) + ours_m.roles.get("other children", 0.0)
        cells = [f"{model}, {protocol}", f"{ours_m.result.rps:,.0f}", f"{total:.0f}"]
        cells += [f"{engine * ours_m.shares.get(layer, 0.0):.0f}" for layer in shown]
        cells += [
            f"{stub:.0f}",
            f"{ref_m.result.rps:,.0f}",
            f"{ref_total:.0f}",
            floor_cell,
            f"{total / ref_total:.2f}",
        ]
        print("| " + " | ".join(cells) + " |")


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
    parser.add_argument("--table", action="store_true", help="the per-layer budget of every workload (above)")
    parser.add_argument(
        "--batching-us",
        type=int,
        default=None,
        help="dynamic batching with this max_queue_delay_microseconds (default: none; 100 with --table)",
    )
    args = parser.parse_args()
    if args.table:
        args.batching_us = 100 if args.batching_us is None else args.batching_us
        table(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        if args.python_backend:
            repo = build_python_repo(Path(tmp) / "repo", [args.model], args.batching_us)
        else:
            repo = build_modelhost_repo(
                Path(tmp) / "repo", [args.model], dynamic_batching_us=args.batching_us
            )
        for frontends in (int(n) for n in args.frontends.split(",")):
            measure(args, frontends, repo, Path(tmp) / "bodies")


if __name__ == "__main__":
    main()
