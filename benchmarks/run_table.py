#!/usr/bin/env python3
"""The comparison table of modelhost against the reference tritonserver, one ``run_load.py`` run per row,
in one command:

    identity-json    identity (python model.py), JSON, c=1 / 8
                     --python-backend --model identity --protocols http-json --concurrency 1,8
    identity-binary  identity (python model.py), binary, c=8 / 64
                     --python-backend --model identity --protocols http-binary --concurrency 8,64
    mlp-python       MLP in a python model.py calling onnxruntime, binary, c=8 / 64
                     --python-backend --model mlp --protocols http-binary --concurrency 8,64
    mlp-onnx         MLP as an ONNX model (reference: the same file through the model.py), binary, c=8 / 64
                     --model mlp --protocols http-binary --concurrency 8,64
    mlp-batch64      MLP (ONNX; reference: the model.py), batch-64 requests, binary, c=4, and the raw
                     in-process onnxruntime rows/s of the same MLP at batch 64, measured in the same run
                     --model mlp --protocols http-binary --concurrency 4 --batch-size 64 --raw-onnxruntime

Every other option goes to each row's run unchanged (``--server``, ``--duration``, ``--repeats``,
``--warmup``, ``--modelhost-args``, ``--modelhost-variants``, ``--modelhost-cmd``, ...), so that

    .venv/bin/python benchmarks/run_table.py --duration 8 --repeats 3 \\
        --modelhost-variants "fp0:--frontend-processes=0;fp2:--frontend-processes=2"

measures the whole table for the reference and two modelhost variants.  ``--rows a,b`` runs some rows only;
``--concurrency N`` replaces every row's list (smoke tests: ``--concurrency 8 --duration 2 --repeats 1``).
The tables are printed as each row finishes and again together at the end; one JSON file holds every row's
full results (benchmarks/results/table-<date>.json unless --output).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run_load  # noqa: E402

ROWS: dict[str, list[str]] = {
    "identity-json": [
        "--python-backend",
        "--model=identity",
        "--protocols=http-json",
        "--concurrency=1,8",
    ],
    "identity-binary": [
        "--python-backend",
        "--model=identity",
        "--protocols=http-binary",
        "--concurrency=8,64",
    ],
    "mlp-python": ["--python-backend", "--model=mlp", "--protocols=http-binary", "--concurrency=8,64"],
    "mlp-onnx": ["--model=mlp", "--protocols=http-binary", "--concurrency=8,64"],
    "mlp-batch64": [
        "--model=mlp",
        "--protocols=http-binary",
        "--concurrency=4",
        "--batch-size=64",
        "--raw-onnxruntime",
    ],
}
# Options each row sets itself: passing them here would be ambiguous.
_ROW_OPTIONS = (
    "--python-backend",
    "--model",
    "--protocols",
    "--batch-size",
    "--raw-onnxruntime",
    "--output",
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Any other option is passed to every row's run_load.py run (see run_load.py --help).",
    )
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma list of {', '.join(ROWS)} (default all)")
    p.add_argument("--output", type=Path, default=None, help="results JSON (default benchmarks/results/...)")
    args, rest = p.parse_known_args(argv)
    rows = [r for r in args.rows.split(",") if r]
    for r in rows:
        if r not in ROWS:
            p.error(f"unknown row {r!r} (known: {', '.join(ROWS)})")
    for opt in rest:
        if opt.split("=")[0] in _ROW_OPTIONS:
            p.error(f"{opt.split('=')[0]} is set by each row; run run_load.py for other workloads")
    # Fail on a bad pass-through option before anything runs.
    parsed = {name: run_load.parse_args([*ROWS[name], *rest]) for name in rows}

    started = dt.datetime.now()
    results: dict[str, Any] = {}
    rc = 0
    for name in rows:
        t0 = time.monotonic()
        run_load.log(f"=== row {name}: run_load.py {shlex.join([*ROWS[name], *rest])}")
        data = run_load.run(parsed[name])
        data["row_minutes"] = round((time.monotonic() - t0) / 60, 1)
        results[name] = data
        rc |= int(data["rc"])
        print(f"\n=== {name} ({data['row_minutes']} min)\n{data['table']}\n", flush=True)

    out = args.output or HERE / "results" / f"table-{started:%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "argv": rest, "results": results}, indent=1) + "\n")
    minutes = (dt.datetime.now() - started).total_seconds() / 60
    print(f"\n{'=' * 40} all rows ({minutes:.1f} min)")
    for name in rows:
        print(f"\n=== {name}: run_load.py {shlex.join([*ROWS[name], *rest])}\n{results[name]['table']}")
    print(f"\nresults: {out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
