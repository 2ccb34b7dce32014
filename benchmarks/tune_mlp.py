"""`modelhost tune` on the bundled MLP: does quick find >= 2x the starting throughput within the latency budget,
and is its pick within 10% of what brute finds?

Starts from the example's own config (one CPU instance, max_batch_size 64, no dynamic batching). Runs
`modelhost tune --search quick --time-limit 10m --latency-budget-ms 20`, then `--search brute` with a longer
limit, each on its own server, one after the other (nothing else should run meanwhile: both share the host's
cores with their load generator). Prints the wall times, the starting and best throughputs, and the ratios, and
writes them to benchmarks/results/tune-mlp-<time>.json.

    .venv/bin/python benchmarks/tune_mlp.py                       # ~10 min + brute's time
    .venv/bin/python benchmarks/tune_mlp.py --quick-limit 2m --brute-limit 5m   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "src" / "modelhost" / "examples"


def tune(repo: Path, output: Path, search: str, limit: str, budget: str) -> dict[str, Any]:
    command = [
        sys.executable, "-m", "modelhost", "tune", "-m", "mlp", f"--model-repository={repo}", "--search", search,
        "--time-limit", limit, "--latency-budget-ms", budget, "--output", str(output), "--no-progress",
    ]  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    print(result.stdout[-3000:])
    if result.returncode != 0:
        print(result.stderr, file=sys.stderr)
    state = json.loads((output / "checkpoint.json").read_text())
    by_key = {_key(entry["variant"]): entry["name"] for entry in state["variants"]}
    within = [p for p in state["points"] if p["p99_ms"] <= float(budget)]
    default_key = next(_key(e["variant"]) for e in state["variants"] if e["name"].endswith("_config_default"))
    start = max(
        (p for p in within if p["variant"] == default_key), key=lambda p: p["throughput"], default=None
    )
    best = max(within, key=lambda p: p["throughput"], default=None)
    return {
        "search": search,
        "time_limit": limit,
        "wall_s": round(wall, 1),
        "exit_code": result.returncode,
        "points": len(state["points"]),
        "configurations": len({p["variant"] for p in state["points"]}),
        "start": _brief(start, by_key),
        "best": _brief(best, by_key),
        "speedup": round(best["throughput"] / start["throughput"], 2) if best and start else None,
    }


def _key(variant: dict[str, Any]) -> str:
    from modelhost.tune.space import Variant

    return Variant.from_json(variant).key


def _brief(point: dict[str, Any] | None, names: dict[str, str]) -> dict[str, Any] | None:
    if point is None:
        return None
    return {
        "config": names[point["variant"]],
        "variant": point["variant"],
        "concurrency": point["concurrency"],
        "throughput": round(point["throughput"], 1),
        "p99_ms": round(point["p99_ms"], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick-limit", default="10m")
    parser.add_argument("--brute-limit", default="45m")
    parser.add_argument("--latency-budget-ms", default="20")
    parser.add_argument("--skip-brute", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tune-bench-"))
    repo = work / "repo"
    shutil.copytree(EXAMPLES / "mlp", repo / "mlp")
    results: dict[str, Any] = {"model": "mlp", "latency_budget_ms": float(args.latency_budget_ms)}
    results["quick"] = tune(repo, work / "quick", "quick", args.quick_limit, args.latency_budget_ms)
    if not args.skip_brute:
        results["brute"] = tune(repo, work / "brute", "brute", args.brute_limit, args.latency_budget_ms)
        quick_best, brute_best = results["quick"]["best"], results["brute"]["best"]
        if quick_best and brute_best:
            results["quick_vs_brute"] = round(quick_best["throughput"] / brute_best["throughput"], 3)
    print(json.dumps(results, indent=1))
    out = ROOT / "benchmarks" / "results" / f"tune-mlp-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}; outputs in {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
