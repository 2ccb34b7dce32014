#!/usr/bin/env python3
"""The slowest tests of a pytest run, from its durations table, for tests/README.md.

    .venv/bin/python -m pytest -n auto --dist loadfile --durations=0 -p no:cacheprovider | tee run.txt
    python3 scripts/slowest_tests.py run.txt                 prints the table
    python3 scripts/slowest_tests.py run.txt --write         rewrites it in tests/README.md

A test's time is its setup, call and teardown together (a module's first test carries the start of the servers
its module shares, its last one their stop). With `--durations=0` the table also sums the time of each module:
under `--dist loadfile` a module runs on one worker, so the run takes about the sum of all modules divided by the
workers, and never less than the longest module.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "tests" / "README.md"
BEGIN, END = "<!-- slowest:begin -->", "<!-- slowest:end -->"
LINE = re.compile(r"^(\d+\.\d+)s (setup|call|teardown)\s+(\S.*)$", re.MULTILINE)
SUMMARY = re.compile(r"^=* ?\d+ (?:passed|failed)\b.* in ([\d.]+)s\b", re.MULTILINE)


def table(text: str, count: int) -> str:
    tests: Counter[str] = Counter()
    for seconds, _, test in LINE.findall(text):
        tests[test] += float(seconds)
    if not tests:
        raise SystemExit("slowest_tests: no durations table in the input (run pytest with --durations=0)")
    lines = ["| # | seconds | test |", "|---:|---:|---|"]
    totals: list[str] = []
    for rank, (test, seconds) in enumerate(tests.most_common(count), 1):
        lines.append(f"| {rank} | {seconds:.1f} | `{test}` |")
    if "= slowest durations =" in text:  # --durations=0: every test, so the module sums are whole
        modules: Counter[str] = Counter()
        for test, seconds in tests.items():
            modules[test.split("::", 1)[0]] += seconds
        lines += ["", "| module | seconds (all its tests) |", "|---|---:|"]
        lines += [f"| `{module}` | {seconds:.1f} |" for module, seconds in modules.most_common(10)]
        totals.append(f"Sum over all tests: {sum(tests.values()):.0f} s.")
    if summary := SUMMARY.findall(text):
        totals.append(f"Wall time of the run: {float(summary[-1]):.0f} s.")
    return "\n".join([*lines, "", " ".join(totals)] if totals else lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", type=Path, help="a pytest run's output, with its durations table")
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--write", action="store_true", help=f"replace the table in {README}")
    args = parser.parse_args()
    new = table(args.output.read_text(errors="replace"), args.count)
    if not args.write:
        print(new)
        return 0
    readme = README.read_text()
    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    README.write_text(f"{readme[:start]}\n{new}\n{readme[end:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
