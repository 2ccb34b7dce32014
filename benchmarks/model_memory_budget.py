#!/usr/bin/env python3
"""Many small models behind --model-memory-budget, with models loaded on demand (issue 13).

50 small ONNX MLPs (FP32 [512] -> 1024 -> 1024 -> [16], ~6 MB of weights each, different random weights per
model) in a temp repository, served by one modelhost in explicit mode with `--model-load-on-demand=true`:

1. sizing: a server without a budget loads one model (it also pays ONNX Runtime's one-time initialization),
   then `--sizing-models` more; the median of their `memory_bytes` (statistics) is one model's worth,
   and the budget is `(--fit + 0.5)` models' worth: `--fit` models fit with room for the measurement's noise,
   `--fit + 1` never do.
2. budget: a server with `--model-memory-budget=<that>` gets a Zipf-like mix (probability of the model of
   rank k proportional to k^-s, ranks assigned to models by a seeded shuffle) from `--clients` threads, each
   with a keep-alive HTTP/1.1 connection, closed loop, `--requests` in all, binary input, JSON output checked
   against numpy's answer for that model's weights (a wrong model or version would show).
3. no budget: the same mix on a server without a budget (every model requested stays loaded).
4. with `--budget-env KEY=VALUE`: the budget run again with that in the server's environment (`budget+env`),
   e.g. `MALLOC_MMAP_THRESHOLD_=131072` (glibc then serves large blocks with mmap and unmaps them on free).

While each run goes, a thread samples the RSS of the server's process tree (/proc/<pid>/statm of the server
and its descendants) every 50 ms and `GET /v2/models/stats` every 200 ms (the ready versions and the sum of
their `memory_bytes`, `memory_usage` in the statistics).

Cold or warm: from the server's log (default format, microsecond timestamps on the same wall clock as the
client's `time.time()`), each model's READY intervals are rebuilt: from "successfully loaded 'X'" to the next
"unloading 'X' ... to make room". A request is cold when its model was not in a READY interval when the client
sent it. Requests sent within `--boundary-ms` of one of their model's READY edges are counted as `ambiguous`
(a request takes a fraction of a millisecond to reach the server), except those answered before the unload
began. As a check, the server's own `cold_start.count` of each version loaded at the end (that version's
count only: the statistics start afresh with each load) is compared with the requests the log classifies as
cold for that load.

    .venv/bin/python benchmarks/model_memory_budget.py                    # about 45 s on 2 cores
    .venv/bin/python benchmarks/model_memory_budget.py --budget-env MALLOC_MMAP_THRESHOLD_=131072
    .venv/bin/python benchmarks/model_memory_budget.py --requests 1000 --skip-unbudgeted
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import http.client
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from servers import DEFAULT_MODELHOST_CMD, Ports, Server  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
INPUT_SIZE = 512
OUTPUT_SIZE = 16
MIB = 2**20
FRACTIONS = (0.1, 0.25, 0.5, 0.75, 1.0)  # points of a run (share of its samples) at which series are reported


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- the models ------------------------------------------------------------------------------------------------


def model_name(index: int) -> str:
    return f"m{index:02d}"


def model_weights(index: int, hidden: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1000 + index)
    shapes = [(INPUT_SIZE, hidden), (hidden, hidden), (hidden, OUTPUT_SIZE)]
    return [(rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32) for shape in shapes]


def expected_output(weights: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    h = np.maximum(x @ weights[0], 0)
    h = np.maximum(h @ weights[1], 0)
    return np.asarray(h @ weights[2], dtype=np.float32)


def write_model(repo: Path, index: int, hidden: int) -> list[np.ndarray]:
    weights = model_weights(index, hidden)
    fp32 = TensorProto.FLOAT
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["INPUT0", "W0"], ["h0"]),
            helper.make_node("Relu", ["h0"], ["r0"]),
            helper.make_node("MatMul", ["r0", "W1"], ["h1"]),
            helper.make_node("Relu", ["h1"], ["r1"]),
            helper.make_node("MatMul", ["r1", "W2"], ["OUTPUT0"]),
        ],
        "mlp",
        [helper.make_tensor_value_info("INPUT0", fp32, ["batch", INPUT_SIZE])],
        [helper.make_tensor_value_info("OUTPUT0", fp32, ["batch", OUTPUT_SIZE])],
        initializer=[numpy_helper.from_array(w, f"W{i}") for i, w in enumerate(weights)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model_dir = repo / model_name(index)
    (model_dir / "1").mkdir(parents=True)
    onnx.save(model, str(model_dir / "1" / "model.onnx"))
    (model_dir / "config.pbtxt").write_text(
        f'name: "{model_name(index)}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {INPUT_SIZE} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {OUTPUT_SIZE} ] }} ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    )
    return weights


# -- the server ------------------------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                found += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return found


def tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and all its descendants."""
    total, todo, seen = 0, [pid], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        with contextlib.suppress(OSError):
            total += int(Path(f"/proc/{current}/statm").read_text().split()[1]) * PAGE
        todo += _children(current)
    return total


@contextlib.contextmanager
def running_server(
    repo: Path, workdir: Path, label: str, *flags: str, env: dict[str, str] | None = None
) -> Iterator[Server]:
    ports = Ports.pick()
    cmd = [
        DEFAULT_MODELHOST_CMD, "serve", f"--model-repository={repo}", "--model-control-mode=explicit",
        "--allow-grpc=false", f"--http-port={ports.http}", f"--metrics-port={ports.metrics}", *flags,
    ]  # fmt: skip
    server = Server("modelhost", cmd, ports, workdir / f"server-{label}.log")
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        server.start()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        server.wait_ready([])
        yield server
    finally:
        server.stop()


def post_json(server: Server, path: str, body: bytes = b"") -> Any:
    request = urllib.request.Request(server.http_url + path, data=body, method="POST")
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read() or b"null")


def get_json(server: Server, path: str) -> Any:
    with urllib.request.urlopen(server.http_url + path, timeout=30) as response:
        return json.loads(response.read())


def loaded_memory(server: Server) -> dict[str, int]:
    """memory_bytes of every ready model version, from the statistics (`memory_usage`, type CPU): present with
    or without a budget, where the repository index shows `memory_bytes` only under one."""
    sizes: dict[str, int] = {}
    for row in get_json(server, "/v2/models/stats")["model_stats"]:
        cpu = [int(u["byte_size"]) for u in row.get("memory_usage", []) if u.get("type") == "CPU"]
        sizes[f"{row['name']}/{row['version']}"] = sum(cpu)
    return sizes


# -- sizing ----------------------------------------------------------------------------------------------------


def infer_once(server: Server, model: int, x: np.ndarray) -> None:
    body, header_length = infer_body(x)
    conn = http.client.HTTPConnection(server.host, server.ports.http, timeout=60)
    try:
        conn.request(
            "POST",
            f"/v2/models/{model_name(model)}/infer",
            body,
            {"Inference-Header-Content-Length": str(header_length)},
        )
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"inference of {model_name(model)} failed: {response.status}")
    finally:
        conn.close()


def size_models(repo: Path, workdir: Path, count: int, x: np.ndarray) -> dict[str, Any]:
    """Load model 0 (which also pays the runtime's one-time initialization), then `count` more, one by one;
    then what each one's first inference adds to the process tree's RSS (not part of its `memory_bytes`)."""
    with running_server(repo, workdir, "sizing") as server:
        assert server.proc is not None
        time.sleep(0.5)
        baseline = tree_rss(server.proc.pid)
        rss_after: list[int] = []
        for i in range(count + 1):
            post_json(server, f"/v2/repository/models/{model_name(i)}/load")
            rss_after.append(tree_rss(server.proc.pid))
        loaded = loaded_memory(server)
        first_inference: list[int] = []
        for i in range(count + 1):
            before = tree_rss(server.proc.pid)
            infer_once(server, i, x)
            first_inference.append(tree_rss(server.proc.pid) - before)
    sizes = {key.split("/")[0]: value for key, value in loaded.items()}
    first = sizes[model_name(0)]
    others = [sizes[model_name(i)] for i in range(1, count + 1)]
    per_model = int(statistics.median(others))
    rss_deltas = [b - a for a, b in zip([baseline, *rss_after], rss_after, strict=False)]
    return {
        "baseline_rss_bytes": baseline,
        "first_model_memory_bytes": first,
        "runtime_init_bytes": first - per_model,
        "memory_bytes": others,
        "per_model_bytes": per_model,
        "spread_pct": round(100 * (max(others) - min(others)) / per_model, 1),
        "rss_deltas_bytes": rss_deltas,
        "first_inference_rss_deltas_bytes": first_inference,
    }


# -- the load --------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Result:
    model: int
    sent: float  # time.time() just before the request was written
    latency_s: float
    ok: bool
    error: str = ""
    cold: bool = False
    ambiguous: bool = False


@dataclass(slots=True)
class Samples:
    rss: list[tuple[float, int]] = field(default_factory=list)
    # (t, ready versions, the sum of their memory_bytes)
    models: list[tuple[float, int, int]] = field(default_factory=list)


def zipf_sequence(models: int, requests: int, s: float, seed: int) -> tuple[list[int], list[float]]:
    """`requests` model indices, and each model's probability (rank k has weight k^-s)."""
    rng = np.random.default_rng(seed)
    weights = np.arange(1, models + 1, dtype=np.float64) ** -s
    by_rank = weights / weights.sum()
    order = rng.permutation(models)  # order[k]: the model of rank k + 1
    probability = np.empty(models)
    probability[order] = by_rank
    return [int(m) for m in rng.choice(models, size=requests, p=probability)], [float(p) for p in probability]


def infer_body(x: np.ndarray) -> tuple[bytes, int]:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1, INPUT_SIZE],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}],
        }
    ).encode()
    return header + x.tobytes(), len(header)


def drive(
    server: Server,
    sequence: list[int],
    clients: int,
    x: np.ndarray,
    expected: dict[int, np.ndarray],
) -> tuple[list[Result], float]:
    """Send `sequence` from `clients` threads (each takes the next request when its previous one is answered)."""
    body, header_length = infer_body(x)
    headers = {
        "Inference-Header-Content-Length": str(header_length),
        "Content-Type": "application/octet-stream",
    }
    results: list[Result | None] = [None] * len(sequence)
    position = iter(range(len(sequence)))
    lock = threading.Lock()

    def client() -> None:
        conn = http.client.HTTPConnection(server.host, server.ports.http, timeout=120)
        while True:
            with lock:
                i = next(position, None)
            if i is None:
                break
            model = sequence[i]
            sent = time.time()
            started = time.perf_counter()
            try:
                conn.request("POST", f"/v2/models/{model_name(model)}/infer", body, headers)
                response = conn.getresponse()
                payload = response.read()
                latency = time.perf_counter() - started
                if response.status != 200:
                    results[i] = Result(model, sent, latency, False, f"{response.status}: {payload[:300]!r}")
                    continue
                output = np.asarray(json.loads(payload)["outputs"][0]["data"], dtype=np.float32)
                if not np.allclose(output, expected[model].ravel(), rtol=1e-3, atol=1e-3):
                    results[i] = Result(model, sent, latency, False, "wrong answer")
                    continue
                results[i] = Result(model, sent, latency, True)
            except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
                results[i] = Result(model, sent, time.perf_counter() - started, False, repr(e))
                conn.close()
                conn = http.client.HTTPConnection(server.host, server.ports.http, timeout=120)
        conn.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    return [r for r in results if r is not None], elapsed


@contextlib.contextmanager
def sampling(
    server: Server, samples: Samples, rss_every_s: float = 0.05, stats_every: int = 4
) -> Iterator[None]:
    assert server.proc is not None
    pid = server.proc.pid
    stop = threading.Event()

    def run() -> None:
        tick = 0
        while not stop.is_set():
            samples.rss.append((time.time(), tree_rss(pid)))
            if tick % stats_every == 0:
                with contextlib.suppress(OSError, ValueError):
                    sizes = loaded_memory(server)
                    samples.models.append((time.time(), len(sizes), sum(sizes.values())))
            tick += 1
            stop.wait(rss_every_s)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


# -- the server's log: loads, unloads, READY intervals ---------------------------------------------------------

_LINE = re.compile(r'^[IWEV](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) \d+ \S+\] "(.*)"\s*$')
_EVENTS = {
    "load_start": re.compile(r"^loading '([^']+)' on demand$"),
    "loaded": re.compile(r"^successfully loaded '([^']+)'$"),
    "unload_start": re.compile(r"^unloading '([^']+)' \(\d+ bytes, least recently used\) to make room"),
    "unloaded": re.compile(r"^successfully unloaded '([^']+)' version \d+"),
    "failed": re.compile(r"^failed to load '([^']+)'"),
}


@dataclass(slots=True)
class Event:
    t: float
    kind: str
    model: str
    text: str


def parse_log(path: Path) -> list[Event]:
    year = dt.date.today().year
    events: list[Event] = []
    for line in path.read_text(errors="replace").splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        month, day, hour, minute, second, micro = (int(g) for g in match.groups()[:6])
        t = dt.datetime(year, month, day, hour, minute, second, micro).timestamp()  # local time, as logged
        text = match.group(7)
        for kind, pattern in _EVENTS.items():
            found = pattern.match(text)
            if found is not None:
                events.append(Event(t, kind, found.group(1), text))
                break
    return events


def ready_intervals(events: list[Event]) -> dict[str, list[tuple[float, float]]]:
    """Per model, the times it was READY: from its load's end to the start of its next unload."""
    intervals: dict[str, list[tuple[float, float]]] = {}
    since: dict[str, float] = {}
    for event in events:
        if event.kind == "loaded":
            since[event.model] = event.t
        elif event.kind == "unload_start" and event.model in since:
            intervals.setdefault(event.model, []).append((since.pop(event.model), event.t))
    for model, start in since.items():
        intervals.setdefault(model, []).append((start, float("inf")))
    return intervals


def classify(results: list[Result], events: list[Event], boundary_s: float) -> None:
    """Cold: the model was not READY when the request was sent. Ambiguous: sent within `boundary_s` of one of
    its model's READY edges (a load's end, an unload's start), except a request answered before the unload
    began (it was served by the version that was then unloaded: warm)."""
    intervals = ready_intervals(events)
    edges: dict[str, list[tuple[float, str]]] = {}
    for event in events:
        if event.kind in ("loaded", "unload_start"):
            edges.setdefault(event.model, []).append((event.t, event.kind))
    for result in results:
        name = model_name(result.model)
        result.cold = not any(start <= result.sent < end for start, end in intervals.get(name, []))
        answered = result.sent + result.latency_s
        result.ambiguous = any(
            abs(t - result.sent) <= boundary_s and not (kind == "unload_start" and answered <= t)
            for t, kind in edges.get(name, [])
        )


def lru_hit_rate(sequence: list[int], slots: int) -> float:
    """The hit rate of an LRU cache of `slots` models on `sequence`, one request at a time (no concurrency)."""
    cache: dict[int, None] = {}
    hits = 0
    for model in sequence:
        if model in cache:
            hits += 1
            del cache[model]
        elif len(cache) >= slots:
            del cache[next(iter(cache))]
        cache[model] = None
    return hits / len(sequence)


_LOAD_SECONDS = re.compile(r"\((\d+\.\d+) s\)$")
_UNLOAD_BYTES = re.compile(r"\((\d+) bytes")


def log_figures(events: list[Event]) -> dict[str, Any]:
    """Load times (the server's figure: from the load's start, waiting for the budget included) and the
    measured memory_bytes of the evicted versions (from the "unloading ... to make room" lines)."""
    seconds = [
        float(m.group(1)) for e in events if e.kind == "loaded" and (m := _LOAD_SECONDS.search(e.text))
    ]
    sizes = [
        int(m.group(1)) for e in events if e.kind == "unload_start" and (m := _UNLOAD_BYTES.search(e.text))
    ]
    figures: dict[str, Any] = {}
    if seconds:
        figures["load_s"] = {
            "p50": round(float(np.percentile(seconds, 50)), 3),
            "p99": round(float(np.percentile(seconds, 99)), 3),
        }
    if sizes:
        median = statistics.median(sizes)
        figures["evicted_memory_bytes"] = {
            "count": len(sizes),
            "min": min(sizes),
            "median": int(median),
            "max": max(sizes),
            "below_80pct_of_median": sum(1 for v in sizes if v < 0.8 * median),
            "above_120pct_of_median": sum(1 for v in sizes if v > 1.2 * median),
        }
    return figures


def check_cold_starts(results: list[Result], events: list[Event], stats: dict[str, Any]) -> dict[str, int]:
    """The server's cold_start.count of the versions loaded at the end, against the requests the log classifies
    as cold for those same loads (sent after the model's previous unload began, before that load ended)."""
    server_count = classified = 0
    loads = 0
    for row in stats.get("model_stats", []):
        name = row["name"]
        mine = [e for e in events if e.model == name]
        loaded = [e.t for e in mine if e.kind == "loaded"]
        if not loaded:
            continue
        last = loaded[-1]
        previous = [e.t for e in mine if e.kind == "unload_start" and e.t < last]
        since = previous[-1] if previous else 0.0
        loads += 1
        server_count += int(row["cold_start"]["count"])
        classified += sum(
            1 for r in results if model_name(r.model) == name and r.cold and since <= r.sent < last
        )
    return {
        "loads_checked": loads,
        "server_cold_start_count": server_count,
        "log_classified_cold": classified,
    }


# -- one run ---------------------------------------------------------------------------------------------------


def percentile_ms(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)) * 1000, 2) if values else None


def latency_summary(values: list[float]) -> dict[str, Any]:
    return {
        "count": len(values),
        "p50_ms": percentile_ms(values, 50),
        "p99_ms": percentile_ms(values, 99),
        "max_ms": round(max(values) * 1000, 2) if values else None,
    }


def run_mix(
    label: str,
    repo: Path,
    workdir: Path,
    sequence: list[int],
    args: argparse.Namespace,
    x: np.ndarray,
    expected: dict[int, np.ndarray],
    budget: int | None,
    env: dict[str, str],
) -> dict[str, Any]:
    flags = ["--model-load-on-demand=true"]
    if budget is not None:
        flags.append(f"--model-memory-budget={budget}")
    samples = Samples()
    with running_server(repo, workdir, label, *flags, env=env) as server:
        assert server.proc is not None
        time.sleep(0.5)
        baseline = tree_rss(server.proc.pid)
        with sampling(server, samples):
            time.sleep(0.2)
            results, elapsed = drive(server, sequence, args.clients, x, expected)
            time.sleep(0.5)
        stats = get_json(server, "/v2/models/stats")
        final_index = post_json(server, "/v2/repository/index")
        rss_end = tree_rss(server.proc.pid)
        command = server.cmd
        log_path = server.log_path
    events = parse_log(log_path)
    classify(results, events, args.boundary_ms / 1000)
    ok = [r for r in results if r.ok]
    warm = [r.latency_s for r in ok if not r.cold]
    cold = [r.latency_s for r in ok if r.cold]
    half = len(results) // 2
    second_half = [r for r in results[half:] if r.ok]
    counts = {kind: sum(1 for e in events if e.kind == kind) for kind in _EVENTS}
    rss = [value for _, value in samples.rss]
    memory = [value for _, _, value in samples.models]
    loaded_counts = [value for _, value, _ in samples.models]
    limit = baseline + budget if budget is not None else None
    # What the process tree holds beyond the baseline and the models' measured memory, over the run.
    unaccounted: list[tuple[float, int]] = []
    for t, loaded_bytes in ((t, m) for t, _, m in samples.models):
        near = min(samples.rss, key=lambda s: abs(s[0] - t))
        unaccounted.append((t, near[1] - baseline - loaded_bytes))
    t0 = samples.rss[0][0] if samples.rss else 0.0

    def at_fraction(series: list[tuple[float, int]], fraction: float) -> int | None:
        return series[min(len(series) - 1, int(fraction * len(series)))][1] if series else None

    summary: dict[str, Any] = {
        "label": label,
        "command": command,
        "env": env,
        "budget_bytes": budget,
        "requests": len(results),
        "failed": len(results) - len(ok),
        "first_failures": [asdict(r) for r in results if not r.ok][:5],
        "elapsed_s": round(elapsed, 2),
        "requests_per_s": round(len(results) / elapsed, 1),
        "hit_rate": round(len(warm) / len(ok), 4) if ok else None,
        "hit_rate_second_half": (
            round(sum(1 for r in second_half if not r.cold) / len(second_half), 4) if second_half else None
        ),
        "ambiguous": sum(1 for r in results if r.ambiguous),
        "warm": latency_summary(warm),
        "cold": latency_summary(cold),
        "all": latency_summary([r.latency_s for r in ok]),
        "log_events": counts,
        **log_figures(events),
        "cold_start_check": check_cold_starts(results, events, stats),
        "models_loaded_at_end": sum(1 for row in final_index if row.get("state") == "READY"),
        "loaded_versions_max": max(loaded_counts) if loaded_counts else None,
        "memory_bytes_sum_max": max(memory) if memory else None,
        "memory_bytes_sum_over_budget_samples": sum(1 for m in memory if budget is not None and m > budget),
        "baseline_rss_bytes": baseline,
        "rss_max_bytes": max(rss) if rss else None,
        "rss_median_second_half_bytes": int(statistics.median(rss[len(rss) // 2 :])) if rss else None,
        "rss_end_bytes": rss_end,
        "rss_limit_bytes": limit,
        "rss_over_limit_max_bytes": (max(rss) - limit) if rss and limit is not None else None,
        "rss_over_limit_fraction_of_samples": (
            round(sum(1 for v in rss if v > limit) / len(rss), 3) if rss and limit is not None else None
        ),
        "rss_max_at_s": round(max(samples.rss, key=lambda v: v[1])[0] - t0, 2) if samples.rss else None,
        "rss_bytes_at": {f"{int(f * 100)}%": at_fraction(samples.rss, f) for f in FRACTIONS},
        "memory_bytes_sum_at": {
            f"{int(f * 100)}%": at_fraction([(t, m) for t, _, m in samples.models], f) for f in FRACTIONS
        },
        "unaccounted_bytes_at": {f"{int(f * 100)}%": at_fraction(unaccounted, f) for f in FRACTIONS},
        "samples": {
            "rss": [(round(t - t0, 2), v) for t, v in samples.rss[::4]],
            "models": [(round(t - t0, 2), n, m) for t, n, m in samples.models],
        },
    }
    return summary


# -- report ----------------------------------------------------------------------------------------------------


def mib(value: int | None) -> str:
    return "-" if value is None else f"{value / MIB:.1f}"


def print_summary(results: dict[str, Any]) -> None:
    sizing = results["sizing"]
    print(
        f"\nper model: {mib(sizing['per_model_bytes'])} MiB (median of {len(sizing['memory_bytes'])}, spread "
        f"{sizing['spread_pct']}%); first model loaded: {mib(sizing['first_model_memory_bytes'])} MiB "
        f"(runtime init ~{mib(sizing['runtime_init_bytes'])} MiB); budget {mib(results['budget_bytes'])} MiB"
    )
    print(
        f"Zipf s={results['zipf_s']}: the {results['fit']} most likely models get {results['top_fit_mass']:.1%}"
    )
    header = (
        f"{'run':<11} {'req':>5} {'fail':>4} {'hit':>6} {'hit2':>6} {'warm p50':>8} {'p99':>7} {'cold p50':>8} "
        f"{'p99':>7} {'loads':>5} {'unl':>4} {'sum mem':>8} {'base':>6} {'rss p50':>8} {'rss max':>8} {'limit':>7}"
    )
    print(header)
    print("-" * len(header))
    for run in results["runs"].values():
        print(
            f"{run['label']:<11} {run['requests']:>5} {run['failed']:>4} {run['hit_rate']:>6.1%} "
            f"{run['hit_rate_second_half']:>6.1%} {run['warm']['p50_ms']!s:>8} {run['warm']['p99_ms']!s:>7} "
            f"{run['cold']['p50_ms']!s:>8} {run['cold']['p99_ms']!s:>7} {run['log_events']['load_start']:>5} "
            f"{run['log_events']['unload_start']:>4} {mib(run['memory_bytes_sum_max']):>8} "
            f"{mib(run['baseline_rss_bytes']):>6} {mib(run['rss_median_second_half_bytes']):>8} "
            f"{mib(run['rss_max_bytes']):>8} {mib(run['rss_limit_bytes']):>7}"
        )
    print(
        "(hit2: hit rate over the second half of the requests; sizes in MiB; sum mem: max of the sampled sum"
    )
    print(" of the loaded versions' memory_bytes; rss p50: median over the second half of the run;")
    print(" limit: baseline RSS + budget)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", type=int, default=50)
    p.add_argument(
        "--fit", type=int, default=10, help="models' worth of memory in the budget (plus half a model)"
    )
    p.add_argument("--hidden", type=int, default=1024, help="hidden width of each MLP (two hidden layers)")
    p.add_argument("--requests", type=int, default=3000)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--zipf-s", type=float, default=1.1)
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--sizing-models", type=int, default=5)
    p.add_argument("--budget", type=int, default=None, help="bytes (default: sized as above)")
    p.add_argument("--boundary-ms", type=float, default=2.0)
    p.add_argument("--skip-unbudgeted", action="store_true")
    p.add_argument(
        "--budget-env",
        action="append",
        metavar="KEY=VALUE",
        help="also run the budget with this in the server's environment (repeatable), e.g. "
        "MALLOC_MMAP_THRESHOLD_=131072; labelled 'budget+env'",
    )
    p.add_argument("--keep-logs", type=Path, default=None, help="copy the server logs into this directory")
    p.add_argument("--output", type=Path, default=None)
    args = p.parse_args()

    sequence, probability = zipf_sequence(args.models, args.requests, args.zipf_s, args.seed)
    x = np.random.default_rng(args.seed).standard_normal((1, INPUT_SIZE)).astype(np.float32)
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "models": args.models,
        "hidden": args.hidden,
        "fit": args.fit,
        "requests": args.requests,
        "clients": args.clients,
        "zipf_s": args.zipf_s,
        "seed": args.seed,
        "top_fit_mass": round(sum(sorted(probability, reverse=True)[: args.fit]), 4),
        "lru_hit_rate": round(lru_hit_rate(sequence, args.fit), 4),
        "requests_per_model": [sequence.count(m) for m in range(args.models)],
    }
    with tempfile.TemporaryDirectory(prefix="mh-bench-budget-") as tmp:
        workdir = Path(tmp)
        repo = workdir / "repo"
        started = time.perf_counter()
        expected = {i: expected_output(write_model(repo, i, args.hidden), x) for i in range(args.models)}
        files = (repo / model_name(0) / "1" / "model.onnx").stat().st_size
        log(
            f"{args.models} models written ({files / MIB:.1f} MiB each) in {time.perf_counter() - started:.1f} s"
        )
        results["model_file_bytes"] = files

        sizing = size_models(repo, workdir, args.sizing_models, x)
        results["sizing"] = sizing
        budget = args.budget or int((args.fit + 0.5) * sizing["per_model_bytes"])
        results["budget_bytes"] = budget
        log(f"sizing: {json.dumps(sizing)}; budget {budget} bytes")

        runs: list[tuple[str, int | None, dict[str, str]]] = [("budget", budget, {})]
        if not args.skip_unbudgeted:
            runs.append(("no-budget", None, {}))
        if args.budget_env:
            env = dict(item.split("=", 1) for item in args.budget_env)
            runs.append(("budget+env", budget, env))
        results["runs"] = {}
        for label, run_budget, env in runs:
            log(f"run '{label}': {args.requests} requests from {args.clients} clients")
            run = run_mix(label, repo, workdir, sequence, args, x, expected, run_budget, env)
            results["runs"][label] = run
            brief = {k: v for k, v in run.items() if k not in ("samples", "command")}
            log(f"{label}: {json.dumps(brief)}")
        if args.keep_logs is not None:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            for path in workdir.glob("server-*.log"):
                (args.keep_logs / path.name).write_bytes(path.read_bytes())
    out = args.output or HERE / "results" / f"model-memory-budget-{time.strftime('%Y-%m-%d')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print_summary(results)
    log(f"written to {out}")


if __name__ == "__main__":
    main()
