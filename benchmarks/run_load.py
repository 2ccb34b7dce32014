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
    .venv/bin/python benchmarks/run_load.py --python-backend --model identity --protocols http-binary \
        --modelhost-variants "fp0:--frontend-processes=0;fp2:--frontend-processes=2"
    .venv/bin/python benchmarks/run_load.py --model mlp --batch-size 64 --concurrency 4 --raw-onnxruntime
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import loadgen  # noqa: E402
import payloads  # noqa: E402
import raw_onnxruntime  # noqa: E402
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
    p.add_argument(
        "--modelhost-args",
        default="",
        help="extra arguments appended to every modelhost serve command (shell-quoted string); the modelhost "
        "column is then labelled modelhost[ARGS]",
    )
    p.add_argument(
        "--modelhost-variants",
        default="",
        help="several modelhost servers in one run: 'NAME:ARGS;NAME:ARGS' (e.g. "
        "'fp0:--frontend-processes=0;fp2:--frontend-processes=2'; ARGS may be empty), labelled "
        "modelhost-NAME, each started in turn with the reference; --modelhost-args come before each ARGS",
    )
    p.add_argument(
        "--raw-onnxruntime",
        action="store_true",
        help="also time the ONNX file of each model (not identity) in this process with bare onnxruntime at the "
        "same batch size, once per repeat with no server running, and report each server's rows/s against it",
    )
    p.add_argument(
        "--raw-onnxruntime-threads",
        type=int,
        default=None,
        help="intra-op threads of that in-process session (default: what the server's instance uses: "
        "modelhost's default for the model's instance count, or 1 with --python-backend, as in the model.py)",
    )
    p.add_argument("--output", type=Path, default=None, help="results JSON (default benchmarks/results/...)")
    args = p.parse_args(argv)
    args.servers = list(SERVERS) if args.server == "both" else args.server.split(",")
    try:
        args.targets = parse_targets(args.servers, args.modelhost_args, args.modelhost_variants)
    except ValueError as e:
        p.error(str(e))
    known = payloads.PYTHON_MODELS if args.python_backend else payloads.MODELS
    args.models = list(known) if args.model == "both" else args.model.split(",")
    args.concurrencies = [int(c) for c in args.concurrency.split(",") if c]
    args.protocol_list = [x for x in args.protocols.split(",") if x]
    for m in args.models:
        if m not in known:
            p.error(f"unknown model {m!r}")
    for x in args.protocol_list:
        if x not in loadgen.PROTOCOLS:
            p.error(f"unknown protocol {x!r}")
    if args.batch_size < 1:
        p.error("--batch-size must be at least 1")
    return args


@dataclass(frozen=True)
class Target:
    """One server of the run: ``label`` names it in the logs, the table and the JSON."""

    label: str
    kind: str  # "modelhost" | "reference"
    extra_args: tuple[str, ...] = ()


def parse_targets(servers: list[str], modelhost_args: str, variants: str) -> list[Target]:
    """The servers of a run, in the order they start within each repeat.

    ``modelhost`` in ``servers`` expands to one target per ``--modelhost-variants`` entry (``NAME:ARGS``,
    ``;``-separated, label ``modelhost-NAME``), or to one target labelled ``modelhost`` (no extra arguments)
    or ``modelhost[ARGS]`` (``--modelhost-args ARGS``)."""
    common = shlex.split(modelhost_args)
    mh: list[Target] = []
    for item in (x.strip() for x in variants.split(";")):
        if not item:
            continue
        name, sep, rest = item.partition(":")
        name = name.strip()
        if not sep or not name or any(c.isspace() or c in "/[]" for c in name):
            raise ValueError(f"--modelhost-variants: {item!r} is not NAME:ARGS (NAME without spaces or /)")
        if any(t.label == f"modelhost-{name}" for t in mh):
            raise ValueError(f"--modelhost-variants: name {name!r} given twice")
        mh.append(Target(f"modelhost-{name}", "modelhost", (*common, *shlex.split(rest))))
    if not mh:
        mh = [Target(f"modelhost[{' '.join(common)}]" if common else "modelhost", "modelhost", tuple(common))]
    targets: list[Target] = []
    for s in servers:
        if s == "modelhost":
            targets += mh
        elif s == "reference":
            targets.append(Target("reference", "reference"))
        else:
            raise ValueError(f"unknown server {s!r}")
    if len({t.label for t in targets}) != len(targets):
        raise ValueError("a server is named twice in --server")
    return targets


def raw_threads(args: argparse.Namespace, model: str) -> int:
    """Intra-op threads of the in-process baseline: those of the server's instance of ``model``."""
    if args.raw_onnxruntime_threads:
        return int(args.raw_onnxruntime_threads)
    if args.python_backend:
        return 1  # reference_repo.MODEL_PY: intra_op_num_threads = 1
    return raw_onnxruntime.modelhost_intra_op_threads(raw_onnxruntime.instance_count(model))


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
    raw_runs: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    configs: dict[str, dict[str, Any]] = {}
    commands: dict[str, list[str]] = {}
    max_c = max(args.concurrencies)
    raw_models = [m for m in args.models if m in payloads.MODELS] if args.raw_onnxruntime else []

    for rep in range(args.repeats):
        for model in raw_models:
            w = workloads[model]
            threads = raw_threads(args, model)
            raw = raw_onnxruntime.measure(
                model, {n: a for n, _, a in w.inputs}, w.outputs, threads, float(args.duration)
            )
            raw_runs.append({"repeat": rep, **raw.as_dict()})
            log(
                f"repeat {rep + 1}/{args.repeats}: raw onnxruntime {model} batch {raw.batch_size}, "
                f"{threads} intra-op thread(s): {raw.rows_per_s:.0f} rows/s ({raw.runs_per_s:.1f} runs/s, "
                f"{raw.cpu_us_per_row:.1f} us CPU/row)"
            )
        for i, target in enumerate(args.targets):
            name = target.label
            if name in failures:
                continue
            ports = Ports.pick()
            cmd = server_command(
                target.kind, repos[target.kind], ports, args.modelhost_cmd, target.extra_args
            )
            commands[name] = cmd
            server = Server(name, cmd, ports, workdir / "logs" / f"{i}-{target.kind}-{rep}.log")
            log(f"repeat {rep + 1}/{args.repeats}: starting {name}: {shlex.join(cmd)}")
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
                                row = {"repeat": rep, "server": name, "kind": target.kind, "model": model}
                                row |= {"protocol": proto, "concurrency": c, "batch_size": args.batch_size}
                                row |= r.as_dict()
                                runs.append(row)
                                err = f"  ERRORS {r.errors}: {r.first_error}" if r.errors else ""
                                log(
                                    f"  {name:9} {model:6} {proto:11} c={c:<3} {r.rps:9.1f} req/s "
                                    f"p50 {r.lat_p50_ms:7.2f} ms p99 {r.lat_p99_ms:7.2f} ms{err}"
                                )
            except (RuntimeError, TimeoutError, OSError, payloads.CheckError) as e:
                failures[name] = f"{type(e).__name__}: {e}"
                log(f"{name} FAILED, skipped from now on: {failures[name]}\n{server.log_tail()}")
    return {
        "runs": runs,
        "raw_onnxruntime": raw_runs,
        "failures": failures,
        "configs": configs,
        "commands": commands,
    }


# ----------------------------------------------------------------------------------------------------------
# Summary
# ----------------------------------------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def summarize_raw(raw_runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per model: the median over the repeats of the in-process onnxruntime baseline."""
    out: dict[str, dict[str, Any]] = {}
    for model in dict.fromkeys(r["model"] for r in raw_runs):
        mine = [r for r in raw_runs if r["model"] == model]
        out[model] = {
            "batch_size": mine[0]["batch_size"],
            "intra_op_threads": mine[0]["intra_op_threads"],
            "repeats": len(mine),
            "rows_per_s": _median([r["rows_per_s"] for r in mine]),
            "rows_per_s_all": [round(r["rows_per_s"], 1) for r in mine],
            "lat_p50_ms": _median([r["lat_p50_ms"] for r in mine]),
            "cpu_us_per_row": _median([r["cpu_us_per_row"] for r in mine]),
        }
    return out


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(b) else math.nan


def summarize(
    runs: list[dict[str, Any]], args: argparse.Namespace, raw: dict[str, dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """One row per model/protocol/concurrency: per server label the medians over the repeats; ``ratios``: each
    modelhost label's median req/s over the reference's (``pair_ratios``: the same per repeat); with several
    modelhost variants, ``variant_ratios``: each one's over the first one's; with a single modelhost server
    also ``ratio`` (= its entry of ``ratios``)."""
    raw = raw or {}
    labels = [t.label for t in args.targets]
    mh_labels = [t.label for t in args.targets if t.kind == "modelhost"]
    rows = []
    for model in args.models:
        for proto in args.protocol_list:
            for c in args.concurrencies:
                row: dict[str, Any] = {"model": model, "protocol": proto, "concurrency": c}
                key = (model, proto, c)
                for name in labels:
                    mine = [
                        r
                        for r in runs
                        if r["server"] == name and (r["model"], r["protocol"], r["concurrency"]) == key
                    ]
                    if not mine:
                        continue
                    cpu_us = [1e6 * r["server_cpu_s"] / r["requests"] for r in mine if r["requests"]]
                    rps = _median([r["rps"] for r in mine])
                    row[name] = {
                        "repeats": len(mine),
                        "rps": rps,
                        "rps_all": [round(r["rps"], 1) for r in mine],
                        "rows_per_s": rps * args.batch_size,
                        "lat_p50_ms": _median([r["lat_p50_ms"] for r in mine]),
                        "lat_p99_ms": _median([r["lat_p99_ms"] for r in mine]),
                        "server_cpu_us_per_req": _median(cpu_us),
                        "errors": sum(r["errors"] for r in mine),
                    }
                    if model in raw:
                        row[name]["vs_raw_onnxruntime"] = _ratio(
                            rps * args.batch_size, raw[model]["rows_per_s"]
                        )
                ratios: dict[str, float] = {}
                pair_ratios: dict[str, list[float]] = {}
                if "reference" in row:
                    ref_by_rep = {
                        r["repeat"]: r["rps"]
                        for r in runs
                        if r["server"] == "reference" and (r["model"], r["protocol"], r["concurrency"]) == key
                    }
                    for mh in (x for x in mh_labels if x in row):
                        ratios[mh] = _ratio(row[mh]["rps"], row["reference"]["rps"])
                        pair_ratios[mh] = [
                            round(r["rps"] / ref_by_rep[r["repeat"]], 3)
                            for r in runs
                            if r["server"] == mh
                            and (r["model"], r["protocol"], r["concurrency"]) == key
                            and ref_by_rep.get(r["repeat"])
                        ]
                    row["ratios"], row["pair_ratios"] = ratios, pair_ratios
                    if len(mh_labels) == 1 and mh_labels[0] in ratios:
                        row["ratio"] = ratios[mh_labels[0]]
                present = [x for x in mh_labels if x in row]
                if len(present) > 1:
                    base = row[present[0]]["rps"]
                    row["variant_ratios"] = {x: _ratio(row[x]["rps"], base) for x in present[1:]}
                rows.append(row)
    return rows


def short_name(label: str, targets: list[Target]) -> str:
    """A modelhost label in a ratio column: ``mh`` when there is one modelhost server, else the variant name."""
    if sum(t.kind == "modelhost" for t in targets) == 1:
        return "mh"
    return label.removeprefix("modelhost-")


def format_table(rows: list[dict[str, Any]], targets: list[Target]) -> str:
    """The req/s table; ``targets``: the servers that have results, in column order."""
    labels = [t.label for t in targets]
    mh = [t.label for t in targets if t.kind == "modelhost"]
    ratio_cols: list[tuple[str, str, str]] = []  # (header, row key, label)
    if "reference" in labels:
        ratio_cols += [(f"{short_name(x, targets)}/ref", "ratios", x) for x in mh]
    if len(mh) > 1:
        first = short_name(mh[0], targets)
        ratio_cols += [(f"{short_name(x, targets)}/{first}", "variant_ratios", x) for x in mh[1:]]
    width = {name: max(15, len(name) + 6) for name in labels}
    head = f"{'model':8} {'protocol':11} {'conc':>4}"
    for name in labels:
        head += f" | {name + ' req/s':>{width[name]}} {'p50 ms':>7} {'p99 ms':>7} {'cpu us/req':>10}"
    for header, _, _ in ratio_cols:
        head += f" | {header:>{max(6, len(header))}}"
    lines = [head, "-" * len(head)]
    for row in rows:
        line = f"{row['model']:8} {row['protocol']:11} {row['concurrency']:>4}"
        for name in labels:
            s = row.get(name)
            if s is None:
                line += f" | {'-':>{width[name]}} {'-':>7} {'-':>7} {'-':>10}"
                continue
            flag = "!" if s["errors"] else " "
            line += (
                f" | {s['rps']:{width[name] - 1}.1f}{flag} {s['lat_p50_ms']:7.2f} {s['lat_p99_ms']:7.2f}"
                f" {s['server_cpu_us_per_req']:10.0f}"
            )
        for header, key, label in ratio_cols:
            value = row.get(key, {}).get(label)
            w = max(6, len(header))
            line += f" | {value:{w}.2f}" if value is not None else f" | {'-':>{w}}"
        lines.append(line)
    if any(row.get(n, {}).get("errors") for row in rows for n in labels):
        lines.append("! = some requests failed in that cell: those measurements are INVALID (see the JSON)")
    return "\n".join(lines)


def format_rows_table(
    rows: list[dict[str, Any]], targets: list[Target], raw: dict[str, dict[str, Any]], batch_size: int
) -> str:
    """Rows/s per server (req/s x batch size) and, where the in-process baseline ran, each as a share of it."""
    labels = [t.label for t in targets]
    width = {name: max(16, len(name) + 7) for name in labels}
    head = f"{'model':8} {'protocol':11} {'conc':>4}"
    for name in labels:
        head += f" | {name + ' rows/s':>{width[name]}} {'/ort':>5}"
    lines = []
    for model, r in raw.items():
        lines.append(
            f"raw onnxruntime in process: {model} batch {r['batch_size']}, {r['intra_op_threads']} intra-op "
            f"thread(s): {r['rows_per_s']:.0f} rows/s (median of {r['repeats']}: {r['rows_per_s_all']}), "
            f"p50 {r['lat_p50_ms']:.2f} ms per run, {r['cpu_us_per_row']:.1f} us CPU/row"
        )
    lines += [head, "-" * len(head)]
    for row in rows:
        line = f"{row['model']:8} {row['protocol']:11} {row['concurrency']:>4}"
        for name in labels:
            s = row.get(name)
            if s is None:
                line += f" | {'-':>{width[name]}} {'-':>5}"
                continue
            flag = "!" if s["errors"] else " "
            vs = s.get("vs_raw_onnxruntime")
            vs_text = f"{vs:5.2f}" if vs is not None and not math.isnan(vs) else f"{'-':>5}"
            line += f" | {s['rows_per_s']:{width[name] - 1}.0f}{flag} {vs_text}"
        lines.append(line)
    lines.append(
        f"rows/s = req/s x batch {batch_size}; /ort = rows/s over the same model's raw onnxruntime rows/s"
    )
    return "\n".join(lines)


def _version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
        return (out.stdout or out.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "?"


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark that ``args`` describe; everything that goes into the results JSON, with ``table``
    (the text to print) and ``rc`` (1 if a server failed)."""
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
        "args": {
            k: ([vars(t) for t in v] if k == "targets" else v) for k, v in vars(args).items() if k != "output"
        },
    }
    with tempfile.TemporaryDirectory(prefix="modelhost-bench-") as tmp:
        result = run_all(args, Path(tmp))
    meta["loadavg_after"] = os.getloadavg()
    meta["minutes"] = round((dt.datetime.now() - started).total_seconds() / 60, 1)
    raw = summarize_raw(result["raw_onnxruntime"])
    summary = summarize(result["runs"], args, raw)
    present = [t for t in args.targets if any(r["server"] == t.label for r in result["runs"])]
    title = (
        f"closed-loop load, {'python-backend model.py files' if args.python_backend else 'ONNX models'}, "
        f"batch {args.batch_size}, {args.duration}s x {args.repeats} repeats, medians; "
        f"cpu us/req = server CPU time per request; X/ref = ratio of median req/s"
    )
    table = title + "\n" + format_table(summary, present)
    if args.batch_size > 1 or raw:
        table += "\n\n" + format_rows_table(summary, present, raw, args.batch_size)
    legend = [f"  {t.label}: {shlex.join(result['commands'][t.label])}" for t in present]
    table += "\n\nservers:\n" + "\n".join(legend)
    for name, why in result["failures"].items():
        table += f"\n\n{name} FAILED: {why}"
    return {
        "meta": meta,
        **result,
        "raw_onnxruntime_summary": raw,
        "summary": summary,
        "table": table,
        "rc": 1 if result["failures"] else 0,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = run(args)
    started = dt.datetime.fromisoformat(data["meta"]["started"])
    out = args.output or HERE / "results" / f"load-{started:%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    print()
    print(data["table"])
    print(f"\nresults: {out}")
    return int(data["rc"])


if __name__ == "__main__":
    sys.exit(main())
