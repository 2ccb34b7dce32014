#!/usr/bin/env python3
"""Python models in environments of their own (issue 29): what the first load (the build) and later loads (the
cache) cost, and whether a stub in its own environment serves slower than one in the server's Python.

Two python models with the same `model.py` (OUTPUT0 = INPUT0, FP32 [16], and it imports `mhbenchpkg`): `plain`
finds the package on the server's own PYTHONPATH, `in_env` gets it from its `requirements.txt`, built by uv
into a cached virtual environment from a wheel this script builds (`--no-index`: no network; pass
`--requirement` to time a real package from an index instead).

1. Load times: the server starts with an empty environment cache (`in_env` is built), twice more with the cache
   filled; each time `POST /v2/repository/models/<m>/load` is timed for both models (explicit mode, so that the
   time is the load's alone).
2. Per request: wrk, HTTP JSON, c=8, `--duration` s per run, the two models alternating for `--rounds` rounds on
   the last server; medians.

    .venv/bin/python benchmarks/python_envs.py --json results/python_envs.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))

from loadgen import run_wrk  # noqa: E402
from servers import Ports, Server, server_command  # noqa: E402

from e2e.wheels import build_wheel  # noqa: E402

MODEL = """
import mhbenchpkg
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]) for x in inputs]
"""
CONFIG = """backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
BODY = json.dumps(
    {"inputs": [{"name": "INPUT0", "shape": [16], "datatype": "FP32", "data": [float(i) for i in range(16)]}]}
).encode()


def post(url: str, timeout: float = 600) -> float:
    started = time.perf_counter()
    request = urllib.request.Request(url, data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        response.read()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requirement", default="", help="a requirement to install from an index instead")
    parser.add_argument("--modelhost-cmd", default=f"{sys.executable} -m modelhost")
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="modelhost-envs-"))
    try:
        wheels, site = work / "wheels", work / "site"
        build_wheel(wheels, "mhbenchpkg", "1.0", 'VERSION = "1.0"\n')
        build_wheel(site, "mhbenchpkg", "1.0", 'VERSION = "1.0"\n')
        shutil.unpack_archive(next(site.glob("*.whl")), site / "unpacked", "zip")
        repo = work / "repo"
        for name in ("plain", "in_env"):
            (repo / name / "1").mkdir(parents=True)
            (repo / name / "1" / "model.py").write_text(MODEL)
            (repo / name / "config.pbtxt").write_text(CONFIG)
        (repo / "in_env" / "requirements.txt").write_text((args.requirement or "mhbenchpkg==1.0") + "\n")
        flags = [f"--backend-config=python,env-cache-dir={work / 'cache'}", "--model-control-mode=explicit"]
        if not args.requirement:
            flags += [
                f"--backend-config=python,env-find-links={wheels}",
                "--backend-config=python,env-no-index=true",
            ]
        os.environ["PYTHONPATH"] = str(site / "unpacked")  # `plain` finds the package in the server's Python
        loads: list[dict[str, float]] = []
        rates: dict[str, list[float]] = {"plain": [], "in_env": []}
        for run in range(3):
            ports = Ports.pick()
            server = Server(
                f"modelhost-{run}",
                server_command("modelhost", repo, ports, args.modelhost_cmd, flags),
                ports,
                work / f"server-{run}.log",
            )
            server.start()
            try:
                server.wait_ready([])
                times = {
                    m: post(f"{server.http_url}/v2/repository/models/{m}/load") for m in ("plain", "in_env")
                }
                loads.append(times)
                print(
                    f"run {run}: load plain {times['plain']:.2f} s, in_env {times['in_env']:.2f} s",
                    flush=True,
                )
                if run == 2:
                    body = work / "body.json"
                    body.write_bytes(BODY)
                    for _ in range(args.rounds):
                        for model in ("plain", "in_env"):
                            url = f"{server.http_url}/v2/models/{model}/infer"
                            result = run_wrk(url, body, None, 8, args.duration, 1)
                            if result.errors:
                                raise RuntimeError(f"{model}: {result.first_error}")
                            rates[model].append(result.rps)
                            print(
                                f"  {model}: {result.rps:,.0f} req/s, p99 {result.lat_p99_ms:.2f} ms",
                                flush=True,
                            )
            finally:
                server.stop()
        summary: dict[str, Any] = {
            "first_load_s": loads[0],
            "cached_loads_s": loads[1:],
            "rps_median": {m: statistics.median(v) for m, v in rates.items()},
            "rps_runs": rates,
        }
        summary["in_env_over_plain"] = summary["rps_median"]["in_env"] / summary["rps_median"]["plain"]
        print(json.dumps(summary, indent=2))
        if args.json:
            Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
