#!/usr/bin/env python3
"""Model management under load: rolling updates, load/unload cycles and memory, S3 against local load times.

Three measurements, each on a modelhost server in explicit model control mode:

1. rolling: clients keep sending to `mlp` over HTTP while it is reloaded N times (a new version directory
   each time, and a config override every other time); every failed request is counted (the target: zero).
2. cycles: clients keep sending to `simple` while `mlp` is loaded and unloaded N times; the server's RSS is
   read after the first cycle and after the last (the target: back within 10%).
3. s3: the time of a load request for `mlp` from a local repository and from an S3 repository served by moto
   on loopback (a cold load: the first sync downloads the files), medians over repeats.

    .venv/bin/python benchmarks/model_management.py                    # all three, ~3 minutes
    .venv/bin/python benchmarks/model_management.py --only cycles --cycles 100
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))

from servers import Ports, Server  # noqa: E402

from e2e.traffic import Send, Traffic  # noqa: E402

EXAMPLES = ROOT / "src" / "modelhost" / "examples"
MODELHOST = str(ROOT / ".venv" / "bin" / "modelhost")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def wait_ready(server: Server, timeout: float = 120) -> None:
    """Server.wait_ready polls every 250 ms; a startup time wants a finer clock."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc is None or server.proc.poll() is not None:
            raise RuntimeError(f"server exited:\n{server.log_tail()}")
        url = server.http_url + "/v2/health/ready"
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1) as response:
            if response.status == 200:
                return
        time.sleep(0.01)
    raise TimeoutError(server.log_tail())


@contextlib.contextmanager
def explicit_server(
    repo: str, workdir: Path, *flags: str, env: dict[str, str] | None = None
) -> Iterator[Server]:
    ports = Ports.pick()
    cmd = [
        MODELHOST, "serve", f"--model-repository={repo}", "--model-control-mode=explicit",
        f"--http-port={ports.http}", f"--grpc-port={ports.grpc}", f"--metrics-port={ports.metrics}", *flags,
    ]  # fmt: skip
    server = Server("modelhost", cmd, ports, workdir / f"server-{ports.http}.log")
    old_env = dict(os.environ)
    os.environ.update(env or {})
    try:
        server.start()
    finally:
        os.environ.clear()
        os.environ.update(old_env)
    try:
        wait_ready(server)
        yield server
    finally:
        server.stop()


def sender(model: str, arrays: dict[str, np.ndarray]) -> Send:
    """One inference of `model` with these inputs (built once, shared read-only by the client threads)."""
    inputs = []
    for name, array in arrays.items():
        tensor = httpclient.InferInput(
            name, list(array.shape), "FP32" if array.dtype == np.float32 else "INT32"
        )
        tensor.set_data_from_numpy(array, binary_data=True)
        inputs.append(tensor)

    def send(client: httpclient.InferenceServerClient) -> None:
        client.infer(model, inputs)

    return send


MLP_INPUT = {"INPUT0": np.random.default_rng(0).standard_normal((1, 256)).astype(np.float32)}
SIMPLE_INPUT = {"INPUT0": np.ones((1, 16), np.int32), "INPUT1": np.ones((1, 16), np.int32)}


def bench_rolling(workdir: Path, reloads: int, clients: int) -> dict[str, object]:
    repo = workdir / "rolling_repo"
    shutil.copytree(EXAMPLES / "mlp", repo / "mlp")
    with explicit_server(str(repo), workdir, "--load-model=mlp") as server:
        url = server.http_url.removeprefix("http://")
        admin = httpclient.InferenceServerClient(url)
        base = admin.get_model_config("mlp")
        started = time.monotonic()
        with Traffic(url, sender("mlp", MLP_INPUT), clients) as traffic:
            time.sleep(1)
            for i in range(reloads):
                version = i + 2
                shutil.copytree(repo / "mlp" / "1", repo / "mlp" / f".staging{version}")
                (repo / "mlp" / f".staging{version}").rename(repo / "mlp" / str(version))
                if i % 2:
                    config = dict(base, instance_group=[{"kind": "KIND_CPU", "count": 1 + i % 3}])
                    admin.load_model("mlp", config=json.dumps(config))
                else:
                    admin.load_model("mlp")
                time.sleep(0.5)
            time.sleep(1)
        elapsed = time.monotonic() - started
    result = {
        "reloads": reloads,
        "clients": clients,
        "requests": traffic.ok,
        "failed": len(traffic.failures),
        "rps": round(traffic.ok / elapsed, 1),
        "first_failures": traffic.failures[:3],
    }
    log(f"rolling: {result}")
    return result


def bench_cycles(workdir: Path, cycles: int, clients: int) -> dict[str, object]:
    repo = workdir / "cycles_repo"
    for name in ("mlp", "simple"):
        shutil.copytree(EXAMPLES / name, repo / name)
    with explicit_server(str(repo), workdir, "--load-model=simple") as server:
        assert server.proc is not None
        pid = server.proc.pid
        url = server.http_url.removeprefix("http://")
        admin = httpclient.InferenceServerClient(url)
        samples: list[float] = []
        with Traffic(url, sender("simple", SIMPLE_INPUT), clients) as traffic:
            for i in range(cycles):
                admin.load_model("mlp")
                admin.unload_model("mlp")
                if i == 0 or i == cycles - 1 or i % 10 == 9:
                    time.sleep(0.3)  # the unload finishes after its last request
                    samples.append(rss_mib(pid))
        first, last = samples[0], samples[-1]
    result = {
        "cycles": cycles,
        "requests_to_other_model": traffic.ok,
        "failed": len(traffic.failures),
        "rss_after_first_mib": round(first, 1),
        "rss_after_last_mib": round(last, 1),
        "rss_growth_pct": round(100 * (last - first) / first, 1),
        "rss_samples_mib": [round(s, 1) for s in samples],
    }
    log(f"cycles: {result}")
    return result


def bench_s3(workdir: Path, repeats: int) -> dict[str, object]:
    """Startup to READY with the model named by --load-model (for S3: listing, downloading into an empty
    mirror, verifying, loading), and a later load request (for S3: the listing that finds nothing changed)."""
    from s3_server import aws_test_env, moto_server, s3_client, upload_directory

    local = workdir / "s3_local_repo"
    shutil.copytree(EXAMPLES / "mlp", local / "mlp")
    size = sum(p.stat().st_size for p in (local / "mlp").rglob("*") if p.is_file())
    startup: dict[str, list[float]] = {"local": [], "s3": []}
    load: dict[str, list[float]] = {"local": [], "s3": []}
    with moto_server() as endpoint:
        upload_directory(s3_client(endpoint), local, "models", "repo")
        host = endpoint.removeprefix("http://")
        for _ in range(repeats):
            for kind, repo in (("local", str(local)), ("s3", f"s3://{host}/models/repo")):
                mirror = tempfile.mkdtemp(prefix="mh-bench-mirror-", dir=workdir)
                env = {**aws_test_env(), "TRITON_AWS_MOUNT_DIRECTORY": mirror}
                started = time.perf_counter()
                with explicit_server(repo, workdir, "--load-model=mlp", env=env) as server:
                    startup[kind].append(time.perf_counter() - started)
                    admin = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
                    admin.unload_model("mlp")
                    started = time.perf_counter()
                    admin.load_model("mlp")
                    load[kind].append(time.perf_counter() - started)

    def med(values: list[float]) -> float:
        return round(statistics.median(values), 3)

    result = {
        "model_bytes": size,
        "repeats": repeats,
        "startup_to_ready_s_median": {"local": med(startup["local"]), "s3": med(startup["s3"])},
        "load_request_s_median": {"local": med(load["local"]), "s3": med(load["s3"])},
        "startup_ratio_s3_over_local": round(med(startup["s3"]) / med(startup["local"]), 2),
        "load_ratio_s3_over_local": round(med(load["s3"]) / med(load["local"]), 2),
    }
    log(f"s3: {result}")
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=("rolling", "cycles", "s3"), action="append")
    p.add_argument("--reloads", type=int, default=10)
    p.add_argument("--cycles", type=int, default=100)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    which = args.only or ["rolling", "cycles", "s3"]
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="mh-bench-mm-") as tmp:
        workdir = Path(tmp)
        if "rolling" in which:
            results["rolling"] = bench_rolling(workdir, args.reloads, args.clients)
        if "cycles" in which:
            results["cycles"] = bench_cycles(workdir, args.cycles, args.clients)
        if "s3" in which:
            results["s3"] = bench_s3(workdir, args.repeats)
    out = HERE / "results" / f"model_management-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    log(f"written to {out}")


if __name__ == "__main__":
    main()
