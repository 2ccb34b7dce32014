"""The GPU check: everything modelhost can only show on a machine with an NVIDIA GPU and many cores, in one call
(scripts/gpu_check.sh runs this file; its comment says how to call it on the device tool).

Steps, each with a time limit inside the whole budget (8 minutes by default):

1. what the machine is: GPU, driver, cores, Python, torch, CuPy, cuda-bindings, onnxruntime, NVML, TensorRT;
2. the packages prepared by scripts/gpu_check_prepare.sh installed into a folder of their own (no network there),
   checked by importing the server and the clients; grpcio and protobuf of this project only where the machine's
   own fail that check; wrk and h2load carried only where the machine has none;
3. every test marked `gpu` (pytest -m gpu), with MODELHOST_REQUIRE_GPU=1 so that none is skipped for want of a
   GPU the machine has;
4. benchmarks/gpu_tensor_transfer.py: a GPU tensor across a process boundary, through the host and through IPC;
5. benchmarks/many_core.py: `--frontend-processes` 0, 1, 2, 4, 8 and auto, HTTP (wrk) and gRPC (h2load), c=256;
6. one summary, `summary.md` and `summary.json`, in the output folder, with the logs beside them; then no
   process of the check is left running.

`--dry-run` prints what would run and exits 0 (on any machine).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SITE = Path("/tmp/modelhost-gpu-check/site")
PINS_SITE = Path("/tmp/modelhost-gpu-check/pins")
# Imports that must work before anything runs: the server, the python backend's stub, both clients, the tests'.
PROBE = (
    "import modelhost.app, modelhost.cli.main, modelhost.backends.python.stub, tritonclient.grpc, tritonclient.http, "
    "grpc_health.v1.health_pb2, onnx, prometheus_client, requests, pytest"
)
# What the machine has, each printed as one JSON value (an error message where it has not).
ENVIRONMENT = {
    "python": "import sys; print(json.dumps(sys.version.split()[0]))",
    "torch": "import torch; print(json.dumps(f'{torch.__version__} (CUDA {torch.version.cuda}, "
    "available: {torch.cuda.is_available()}, {torch.cuda.device_count()} device(s))'))",
    "cupy": "import cupy; print(json.dumps(cupy.__version__))",
    "cuda_bindings": "from importlib.metadata import version; print(json.dumps(version('cuda-bindings')))",
    "nvidia_ml_py": "from importlib.metadata import version; print(json.dumps(version('nvidia-ml-py')))",
    "onnxruntime": "import onnxruntime as o; print(json.dumps(f'{o.__version__}: {o.get_available_providers()}'))",
    "tensorrt": "import tensorrt; print(json.dumps(tensorrt.__version__))",
    "modelhost_gpu_count": "from modelhost.host.devices import gpu_count; print(json.dumps(gpu_count()))",
}
# The many-core runs: 4 s each, so that the six modes fit the budget with the tests (about 200 s in all).
SCALING = ["benchmarks/many_core.py", "--duration", "4"]
# Every process the check starts carries this variable (servers, frontends, stubs, load generators: children
# inherit it, sessions of their own too); what still carries it at the end is stopped, and nothing else.
MARK = "MODELHOST_GPU_CHECK"


@dataclass
class Step:
    name: str
    command: str
    seconds: float = 0.0
    status: str = "not run"  # ok, failed (exit status N), timed out, not run
    note: str = ""  # the end of its output
    log: str = ""  # the file its output went to, in the output folder


@dataclass
class Check:
    out: Path
    prepared: Path
    budget_s: float
    python: str
    dry_run: bool = False
    started: float = field(default_factory=time.monotonic)
    steps: list[Step] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=lambda: {**os.environ, MARK: uuid.uuid4().hex})
    facts: dict[str, Any] = field(default_factory=dict)

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def run(self, name: str, argv: list[str], limit_s: float, log: str | None = None, **env: str) -> Step:
        """Run one command with a time limit (within what is left), its output into `log` under the output
        folder; a step that cannot start in time is not run."""
        step = Step(name, shlex.join(argv), log=log or "")
        self.steps.append(step)
        if self.dry_run:
            step.status = "dry run"
            print(f"[{name}] $ {step.command}" + (f"  > {log}" if log else ""))
            return step
        limit = min(limit_s, self.left() - 20)
        if limit < 5:
            step.note = "no time left in the budget"
            return step
        started = time.monotonic()
        with open(self.out / log, "w") if log else contextlib.nullcontext() as sink:
            process = subprocess.Popen(
                argv,
                cwd=ROOT,
                env={**self.env, **env},
                stdout=sink or subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
            try:
                output, _ = process.communicate(timeout=limit)
                step.status = (
                    "ok" if process.returncode == 0 else f"failed (exit status {process.returncode})"
                )
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                output, _ = process.communicate()
                step.status = f"timed out after {limit:.0f} s"
        step.seconds = round(time.monotonic() - started, 1)
        if log:
            output = (self.out / log).read_text(errors="replace")
        if output:
            step.note = output.strip()[-2000:]
        print(f"[{name}] {step.status} in {step.seconds} s", flush=True)
        return step


def describe_machine(check: Check) -> None:
    if check.dry_run:
        print("[machine] nvidia-smi, nproc, and the versions of: " + ", ".join(ENVIRONMENT))
        return
    facts: dict[str, Any] = {"cores": os.cpu_count()}
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        facts["gpus"] = [line.strip() for line in smi.stdout.strip().splitlines()]
    except (OSError, subprocess.SubprocessError) as e:
        facts["gpus"] = f"nvidia-smi: {e}"
    for name, code in ENVIRONMENT.items():
        done = subprocess.run(
            [check.python, "-c", "import json\n" + code],
            capture_output=True,
            text=True,
            timeout=60,
            env=check.env,
            cwd=ROOT,
        )
        lines = done.stdout.strip().splitlines()
        if done.returncode == 0 and lines:
            facts[name] = json.loads(lines[-1])
        else:
            facts[name] = "not available: " + (done.stderr.strip().splitlines() or ["?"])[-1][:200]
    check.facts["machine"] = facts
    print("[machine] " + json.dumps(facts), flush=True)


def install(check: Check) -> None:
    """The prepared wheels into SITE (pins into PINS_SITE), then PYTHONPATH set to what imports."""
    wheels = sorted((check.prepared / "wheels").glob("*.whl"))
    pins = sorted((check.prepared / "pins").glob("*.whl"))
    if not check.dry_run and not wheels:
        check.facts["install"] = (
            f"nothing prepared in {check.prepared} (run scripts/gpu_check_prepare.sh here)"
        )
        print(f"[install] {check.facts['install']}", flush=True)
    pip = [
        check.python,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        "--no-deps",
        "--no-compile",
        "--no-cache-dir",
    ]
    base = check.env.get("PYTHONPATH", "")
    src = str(ROOT / "src")
    if wheels or check.dry_run:
        check.run("install wheels", [*pip, "--target", str(SITE), *map(str, wheels or ["<wheels>"])], 120)
    if pins or check.dry_run:
        check.run("install pins", [*pip, "--target", str(PINS_SITE), *map(str, pins or ["<pins>"])], 60)
    choices = [
        ("the machine's grpcio and protobuf", [src, str(SITE)]),
        ("this project's grpcio and protobuf", [src, str(PINS_SITE), str(SITE)]),
    ]
    for label, paths in choices:
        check.env["PYTHONPATH"] = os.pathsep.join([*paths, *([base] if base else [])])
        probe = check.run(f"import check ({label})", [check.python, "-c", PROBE], 120)
        if probe.status in ("ok", "dry run"):
            check.facts["imports"] = label
            break
    else:
        check.facts["imports"] = "failed: " + probe.note[-500:]
    tools = check.prepared / "bin"
    for tool in ("wrk", "h2load"):
        if (
            not check.dry_run
            and subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode
        ):
            if (tools / tool).is_file():
                check.env["PATH"] = f"{tools}{os.pathsep}{check.env.get('PATH', '')}"
                libs = str(check.prepared / "lib")
                check.env["LD_LIBRARY_PATH"] = os.pathsep.join(
                    filter(None, [libs, check.env.get("LD_LIBRARY_PATH")])
                )
                check.facts[tool] = f"carried ({tools / tool})"
            else:
                check.facts[tool] = "missing"
        else:
            check.facts.setdefault(tool, "the machine's own")


def gpu_test_files() -> list[str]:
    """The test modules with tests marked `gpu`."""
    found = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if re.search(r"pytest\.mark\.gpu\b", path.read_text(encoding="utf-8")):
            found.append(str(path.relative_to(ROOT)))
    return found


def run_tests(check: Check) -> None:
    files = gpu_test_files()
    if check.dry_run:
        print(f"[tests] {len(files)} modules with tests marked gpu")
    # That machine's own pytest plugins stay out (the suite needs none), and the deprecation warnings of its
    # newer packages are shown, not failures: the check is about the GPU paths, once, in a few minutes.
    argv = [check.python, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-q", "-rA"]
    argv += ["-W", "default::DeprecationWarning", "--junitxml", str(check.out / "gpu-tests.xml"), *files]
    env = {"MODELHOST_REQUIRE_GPU": "1", "PYTHONUNBUFFERED": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    check.run("tests marked gpu", argv, 300, log="gpu-tests.log", **env)


def run_benchmarks(check: Check) -> None:
    check.run(
        "GPU tensor transfer",
        [check.python, "benchmarks/gpu_tensor_transfer.py", "--json", str(check.out / "transfer.json")],
        60,
        log="transfer.log",
    )
    deadline = max(0.0, check.left() - 40)
    argv = [
        check.python,
        *SCALING,
        "--json",
        str(check.out / "scaling.json"),
        "--deadline-s",
        f"{deadline:.0f}",
    ]
    check.run(
        "many-core scaling",
        [*argv, "--modelhost-cmd", f"{check.python} -m modelhost"],
        deadline + 30,
        "scaling.log",
    )
    if check.dry_run:
        subprocess.run([check.python, *SCALING, "--dry-run"], cwd=ROOT, check=False)


def stop_leftovers(check: Check) -> list[str]:
    """Kill what the check left running (servers start sessions of their own), found by the variable MARK its
    processes carry; the command lines of what was."""
    if check.dry_run:
        print("[cleanup] stop every process the check started that is still running")
        return []
    mark = f"{MARK}={check.env[MARK]}".encode()
    left: list[str] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if mark not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        left.append(cmdline.strip()[:120])
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(entry.name), signal.SIGKILL)
    return left


# -- the summary ------------------------------------------------------------------------------------------------


def test_outcomes(junit: Path) -> list[dict[str, str]]:
    """One entry per test of a JUnit XML report: its id, outcome and, where it did not pass, why."""
    if not junit.is_file():
        return []
    outcomes = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (found.get("message") or found.text or "").strip()
                break
        outcomes.append({"test": test_id, "outcome": outcome, "message": message[:600]})
    return outcomes


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def summary(check: Check) -> dict[str, Any]:
    tests = test_outcomes(check.out / "gpu-tests.xml")
    counts: dict[str, int] = {}
    for t in tests:
        counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
    return {
        "facts": check.facts,
        "tests": {"counts": counts, "outcomes": tests},
        "transfer": _read_json(check.out / "transfer.json"),
        "scaling": _read_json(check.out / "scaling.json"),
        "steps": [asdict(s) for s in check.steps],
        "seconds": round(time.monotonic() - check.started, 1),
    }


def markdown(data: dict[str, Any]) -> str:
    facts = data["facts"]
    machine = facts.get("machine", {})
    out = ["# GPU check", ""]
    out += [f"- {key}: {value}" for key, value in machine.items()]
    out += [f"- {key}: {facts[key]}" for key in ("install", "imports", "wrk", "h2load") if key in facts]
    out += [f"- whole check: {data['seconds']} s", ""]
    counts = data["tests"]["counts"]
    out += ["## Tests marked gpu", ""]
    out.append(", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) or "no test report")
    out.append("")
    for t in data["tests"]["outcomes"]:
        line = f"- {t['outcome']}: `{t['test']}`"
        if t["outcome"] != "passed" and t["message"]:
            line += " — " + t["message"].splitlines()[0][:300]
        out.append(line)
    if data.get("transfer"):
        out += ["", "## A GPU tensor across a process boundary (medians, microseconds)", ""]
        out.append("| bytes | to host | to device | IPC open | IPC open + copy + close |")
        out.append("|---|---|---|---|---|")
        for r in data["transfer"]:
            out.append(
                f"| {r['bytes']:,} | {r['to_host_us']} | {r['to_device_us']} | {r['ipc_open_us']} | "
                f"{r['ipc_open_copy_close_us']} |"
            )
    scaling = data.get("scaling")
    if scaling:
        out += ["", f"## Frontend processes, {scaling['cores']} cores, c={scaling['concurrency']}", ""]
        out.append("CPU columns: cores used during the run (frontends: all of them, with how many ran).")
        out.append("")
        out.append(
            "| fp | model | protocol | req/s | p50 ms | p99 ms | engine | frontends (n) | stubs | client | errors |"
        )
        out.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for c in scaling["cells"]:
            cpu = c.get("cpu", {})
            error = f"{c['errors']}" + (f": {c['first_error'][:80]}" if c.get("first_error") else "")
            out.append(
                f"| {c['mode']} | {c['model']} | {c['protocol']} | {c['rps']:,.0f} | {c['p50_ms']} | {c['p99_ms']} | "
                f"{cpu.get('engine', 0)} | {cpu.get('frontends', 0)} ({c.get('frontends', 0)}) | "
                f"{cpu.get('stubs', 0)} | {cpu.get('client', 0)} | {error} |"
            )
        if scaling.get("not_run"):
            out.append(f"\nNot run (time): --frontend-processes {', '.join(scaling['not_run'])}")
    out += ["", "## Steps", ""]
    for s in data["steps"]:
        out.append(
            f"- {s['name']}: {s['status']} ({s['seconds']} s)" + (f", log {s['log']}" if s["log"] else "")
        )
        if s["status"] not in ("ok", "dry run") and s["note"]:
            out += ["", "  ```", *("  " + line for line in s["note"].splitlines()[-12:]), "  ```"]
    if data.get("leftovers"):
        out += ["", "Processes left running, stopped: " + "; ".join(data["leftovers"])]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-check-out")))
    parser.add_argument("--prepared", type=Path, default=ROOT / ".gpu_check")
    parser.add_argument(
        "--budget-s", type=float, default=480.0, help="the whole check (default: %(default)s)"
    )
    parser.add_argument("--python", default=sys.executable, help="the Python to run everything with")
    parser.add_argument("--dry-run", action="store_true", help="print what would run and exit 0")
    args = parser.parse_args(argv)
    check = Check(args.out.resolve(), args.prepared.resolve(), args.budget_s, args.python, args.dry_run)
    if args.dry_run:
        print(f"GPU check plan (budget {args.budget_s:.0f} s, output folder {check.out}):")
        print(f"[prepared] {check.prepared}: " + ("present" if check.prepared.is_dir() else "missing: run "
              "scripts/gpu_check_prepare.sh here first"))  # fmt: skip
    else:
        check.out.mkdir(parents=True, exist_ok=True)
    try:
        describe_machine(check)
        install(check)
        run_tests(check)
        run_benchmarks(check)
    finally:
        leftovers = stop_leftovers(check)
    if args.dry_run:
        print(f"[summary] {check.out / 'summary.md'} and summary.json")
        return 0
    data = summary(check)
    data["leftovers"] = leftovers
    (check.out / "summary.json").write_text(json.dumps(data, indent=1))
    (check.out / "summary.md").write_text(markdown(data))
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
