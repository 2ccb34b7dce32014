"""Command line of scripts/triton_qa.py."""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from triton_qa import report
from triton_qa.core import SuiteResult
from triton_qa.runner import TRANSLATIONS, run_suite
from triton_qa.suites import SUITES

REPO = Path(__file__).resolve().parents[2]
TAG = "v2.51.0"
CLIENT_VERSION = TAG.removeprefix("v")


def default_python() -> str:
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="triton_qa.py",
        description="Run Triton's own qa suites (qa/L0_*) against modelhost, on CPU, and summarise the results.",
        epilog=(
            f"Get Triton's repository at the tag the recipes follow with: git clone --depth 1 --branch {TAG} "
            "https://github.com/triton-inference-server/server"
        ),
    )
    p.add_argument("--triton", type=Path, help=f"a checkout of triton-inference-server/server at {TAG}")
    p.add_argument("--suites", default="", help="comma-separated suites (default: every suite it knows)")
    p.add_argument(
        "--out", type=Path, default=Path("/tmp/triton-qa"), help="output folder (default: %(default)s)"
    )
    p.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="generated model repositories (default: OUT/cache, kept between runs)",
    )
    p.add_argument("--configs", default=None, help="only the configurations whose name matches this glob")
    p.add_argument(
        "--full",
        action="store_true",
        help="also the configurations left out by default for time (repeats of others)",
    )
    p.add_argument("--python", default=default_python(), help="the Python with modelhost and tritonclient")
    p.add_argument(
        "--tritonclient",
        default=CLIENT_VERSION,
        help="the tritonclient version the tests use, pip-installed into the cache, or 'installed' for the one "
        "--python has (default: %(default)s, the release the tests were written for)",
    )
    p.add_argument("--list", action="store_true", help="list the suites it knows and exit")
    p.add_argument(
        "--report-only",
        action="store_true",
        help="rebuild summary.md / summary.json from the suites' results already in OUT",
    )
    return p.parse_args(argv)


def _check_triton(triton: Path) -> str | None:
    if not (triton / "qa" / "common" / "gen_qa_models.py").exists():
        return f"{triton} is not a checkout of triton-inference-server/server (no qa/common/gen_qa_models.py)"
    if (triton / ".git").exists() and shutil.which("git"):
        tag = subprocess.run(
            ["git", "-C", str(triton), "describe", "--tags", "--exact-match"], capture_output=True, text=True
        ).stdout.strip()
        if tag and tag != TAG:
            print(f"warning: {triton} is at {tag}; the recipes follow {TAG}", file=sys.stderr)
    return None


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM as an exception, so that every server and test process is stopped on the way out.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    names = [s.strip() for s in ns.suites.split(",") if s.strip()] or list(SUITES)
    if ns.list:
        for name in SUITES:
            print(name)
        return 0
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        print(f"unknown suites: {', '.join(unknown)}; known: {', '.join(SUITES)}", file=sys.stderr)
        return 2
    out: Path = ns.out.resolve()
    suites_dir = out / "suites"
    notes = [f"{flag} added to every server start: {why}" for flag, why in TRANSLATIONS]
    if ns.tritonclient != "installed":
        notes.append(f"The tests use tritonclient {ns.tritonclient}; the server, the packages --python has")
    notes.append(
        "Tests and servers run as in Triton's CPU-only CI: TRITON_SERVER_CPU_ONLY=1, BACKENDS='onnx libtorch' "
        "(plus python where the suite has python models), TRITONSERVER_IPADDR=localhost, qa/common on PYTHONPATH"
    )
    meta = {"triton": TAG, "started": report.now(), "command": shlex.join(sys.argv)}
    if ns.report_only:
        results = [
            report.suite_from_json(json.loads((suites_dir / f"{n}.json").read_text()))
            for n in SUITES
            if (suites_dir / f"{n}.json").exists() and (not ns.suites or n in names)
        ]
        report.write(out, results, meta, notes)
        print(f"{report.pass_line(report.totals(results))}\nsummary: {out / 'summary.md'}")
        return 0
    if ns.triton is None:
        print(
            "--triton DIR is required (a checkout of triton-inference-server/server at v2.51.0)",
            file=sys.stderr,
        )
        return 2
    triton: Path = ns.triton.resolve()
    problem = _check_triton(triton)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    cache: Path = (ns.cache or out / "cache").resolve()
    cache.mkdir(parents=True, exist_ok=True)
    suites_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results: list[SuiteResult] = []
    for name in names:
        res = run_suite(
            SUITES[name],
            triton,
            out,
            cache,
            ns.python,
            ns.configs,
            ns.full,
            log=lambda m: print(m, flush=True),
            client="" if ns.tritonclient == "installed" else ns.tritonclient,
        )
        results.append(res)
        (suites_dir / f"{name}.json").write_text(json.dumps(res.to_json(), indent=1) + "\n")
        print(f"== {name}: {report.pass_line(res.counts())} [{res.seconds / 60:.1f} min]", flush=True)
        meta["seconds"] = round(time.monotonic() - started)
        report.write(out, results, meta, notes)
    print(f"\n{report.pass_line(report.totals(results))}\nsummary: {out / 'summary.md'}")
    return 0
