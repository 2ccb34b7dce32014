"""The closed-loop load generators behind each protocol of the benchmark.

* ``http-binary`` / ``http-json``: ``wrk`` (C, one thread by default) with ``wrk_post.lua`` posting a
  prebuilt KServe body on keep-alive connections; non-200 answers are counted by the script.
* ``grpc``: ``grpc_load.py``, grpc.aio in several processes (Python; costs ~250 us of client CPU per call).
* ``grpc-h2load``: ``h2load`` (C, nghttp2) posting the same gRPC frame over HTTP/2, ``-m`` streams per
  connection.  h2load does not read gRPC trailers, so errors are found from the DATA bytes received: a
  failed call is trailers-only and carries no message, so ``data != requests * frame_size`` means errors.

Every runner returns the same :class:`RunResult`; ``server_cpu_s`` is filled by the caller.
"""

from __future__ import annotations

import json
import math
import os
import resource
import shutil
import struct
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
WRK_SCRIPT = HERE / "wrk_post.lua"
PROTOCOLS = ("http-binary", "http-json", "grpc", "grpc-h2load")
GRPC_METHOD_PATH = "/inference.GRPCInferenceService/ModelInfer"


@dataclass
class RunResult:
    requests: int
    errors: int
    duration_s: float
    rps: float
    lat_p50_ms: float
    lat_p99_ms: float
    first_error: str = ""
    client_cpu_s: float = math.nan
    server_cpu_s: float = math.nan

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class Bodies:
    """The prebuilt request of one model, on disk for the C load generators."""

    binary_file: Path
    binary_header_len: int
    json_file: Path
    grpc_request: bytes
    grpc_frame_file: Path  # 5-byte gRPC message prefix + serialized ModelInferRequest


def write_bodies(
    directory: Path, model: str, binary: tuple[bytes, int], json_body: bytes, grpc: bytes
) -> Bodies:
    directory.mkdir(parents=True, exist_ok=True)
    b = Bodies(
        binary_file=directory / f"{model}.bin",
        binary_header_len=binary[1],
        json_file=directory / f"{model}.json",
        grpc_request=grpc,
        grpc_frame_file=directory / f"{model}.grpc",
    )
    b.binary_file.write_bytes(binary[0])
    b.json_file.write_bytes(json_body)
    b.grpc_frame_file.write_bytes(b"\x00" + struct.pack(">I", len(grpc)) + grpc)
    return b


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def require_tools(protocols: list[str]) -> None:
    needs = {"http-binary": "wrk", "http-json": "wrk", "grpc-h2load": "h2load"}
    missing = sorted({needs[p] for p in protocols if p in needs and shutil.which(needs[p]) is None})
    if missing:
        raise SystemExit(
            f"missing load generator(s): {', '.join(missing)} "
            "(apt-get install -y wrk nghttp2-client; h2load is in nghttp2-client)"
        )


def _tool(name: str) -> str:
    """The load generator's path: from PATH, where scripts/gpu_check.sh puts binaries it carries."""
    return shutil.which(name) or name


def _tool_env() -> dict[str, str]:
    """What the load generators need of this environment: the libraries carried with them (LD_LIBRARY_PATH), and
    the mark scripts/gpu_check.py finds its processes by."""
    return {k: os.environ[k] for k in ("LD_LIBRARY_PATH", "MODELHOST_GPU_CHECK") if k in os.environ}


def run_wrk(
    url: str, body_file: Path, header_len: int | None, concurrency: int, duration: int, threads: int
) -> RunResult:
    env = {
        "BENCH_BODY_FILE": str(body_file),
        "BENCH_CONTENT_TYPE": "application/octet-stream" if header_len is not None else "application/json",
        "BENCH_HEADER_LEN": "" if header_len is None else str(header_len),
        "PATH": "/usr/bin:/bin:/usr/local/bin",
        **_tool_env(),
    }
    threads = max(1, min(threads, concurrency))
    cmd = [
        _tool("wrk"),
        f"-t{threads}",
        f"-c{concurrency}",
        f"-d{duration}s",
        "--timeout",
        "30s",
        "-s",
        str(WRK_SCRIPT),
        url,
    ]
    cpu0 = _children_cpu()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=duration + 120, check=False)
    cpu = _children_cpu() - cpu0
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH_RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    r = json.loads(line.removeprefix("BENCH_RESULT "))
    dur = r["duration_us"] / 1e6
    errors = r["non200"] + r["err_connect"] + r["err_read"] + r["err_write"] + r["err_timeout"]
    first = r["first_error"] or ("" if not errors else f"socket errors: {r}")
    ok = r["requests"] - r["non200"]
    return RunResult(
        requests=r["requests"],
        errors=errors,
        duration_s=dur,
        rps=ok / dur,
        lat_p50_ms=r["lat_p50_us"] / 1e3,
        lat_p99_ms=r["lat_p99_us"] / 1e3,
        first_error=first,
        client_cpu_s=cpu,
    )


def _split(concurrency: int, connections: int) -> tuple[int, int]:
    """(connections, streams per connection) with connections * streams == concurrency."""
    c = max(1, min(connections, concurrency))
    while concurrency % c:
        c -= 1
    return c, concurrency // c


def run_h2load(
    target: str,
    frame_file: Path,
    response_frame_size: int,
    concurrency: int,
    duration: int,
    connections: int,
    threads: int = 1,
) -> RunResult:
    conns, streams = _split(concurrency, connections)
    with tempfile.TemporaryDirectory(prefix="h2load-") as tmp:
        log = Path(tmp) / "requests.log"
        cmd = [
            _tool("h2load"),
            f"-t{max(1, min(threads, conns))}",
            f"-c{conns}",
            f"-m{streams}",
            "-D",
            str(duration),
            "--log-file",
            str(log),
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
            "-d",
            str(frame_file),
            f"http://{target}{GRPC_METHOD_PATH}",
        ]
        cpu0 = _children_cpu()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 120, check=False)
        cpu = _children_cpu() - cpu0
        out = proc.stdout
        if proc.returncode != 0 or "requests:" not in out:
            raise RuntimeError(f"h2load failed (rc={proc.returncode}):\n{out}\n{proc.stderr}")
        lat_us = np.loadtxt(log, usecols=2, dtype=np.float64, ndmin=1) if log.stat().st_size else np.zeros(0)
    stats = _parse_h2load(out)
    done, failed = stats["done"], stats["failed"] + stats["errored"] + stats["timeout"]
    errors = failed + stats["non2xx"]
    first_error = ""
    if errors:
        first_error = f"h2load: {failed} failed, {stats['non2xx']} non-2xx"
    expected = (done - errors) * response_frame_size
    if stats["data"] != expected:
        missing = round((expected - stats["data"]) / response_frame_size)
        errors += max(1, missing)
        first_error = first_error or (
            f"gRPC errors: received {stats['data']} DATA bytes, {expected} expected for {done} answers "
            f"of {response_frame_size} bytes"
        )
    return RunResult(
        requests=done,
        errors=errors,
        duration_s=float(duration),
        rps=(done - errors) / duration,
        lat_p50_ms=float(np.percentile(lat_us, 50) / 1e3) if lat_us.size else math.nan,
        lat_p99_ms=float(np.percentile(lat_us, 99) / 1e3) if lat_us.size else math.nan,
        first_error=first_error,
        client_cpu_s=cpu,
    )


def _parse_h2load(out: str) -> dict[str, int]:
    stats = {"done": 0, "failed": 0, "errored": 0, "timeout": 0, "non2xx": 0, "data": -1}
    for line in out.splitlines():
        words = line.replace(",", "").split()
        if line.startswith("requests:"):
            # requests: N total, N started, N done, N succeeded, N failed, N errored, N timeout
            for value, key in zip(words[1::2], words[2::2], strict=False):
                if key in stats:
                    stats[key] = int(value)
        elif line.startswith("status codes:"):
            # status codes: N 2xx, N 3xx, N 4xx, N 5xx
            counts = dict(zip(words[3::2], (int(v) for v in words[2::2]), strict=False))
            stats["non2xx"] = counts.get("3xx", 0) + counts.get("4xx", 0) + counts.get("5xx", 0)
        elif line.startswith("traffic:"):
            # traffic: X (N) total, X (N) headers (space savings P%), X (N) data
            nums = [int(w.strip("()")) for w in words if w.startswith("(") and w.strip("()").isdigit()]
            stats["data"] = nums[-1]
    return stats


def run_grpc_python(
    target: str, request: bytes, concurrency: int, duration: int, processes: int
) -> RunResult:
    import grpc_load

    cpu0 = _children_cpu()
    r = grpc_load.run(target, request, concurrency, float(duration), processes=processes, warmup=0.0)
    cpu = _children_cpu() - cpu0
    return RunResult(
        requests=r.requests + r.errors,
        errors=r.errors,
        duration_s=r.duration_s,
        rps=r.rps,
        lat_p50_ms=r.lat_p50_ms,
        lat_p99_ms=r.lat_p99_ms,
        first_error=r.first_error,
        client_cpu_s=cpu,
    )
