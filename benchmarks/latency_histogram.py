#!/usr/bin/env python3
"""What the statistics' latency histogram (the web console's p50 and p99) costs per request: one
`LatencyHistogram.add`, and `ModelStats.succeeded` with it, timed in a loop (best of 5).

    .venv/bin/python benchmarks/latency_histogram.py

The end-to-end side (the console on and off, against the reference, in one run) is run_load.py's:
    .venv/bin/python benchmarks/run_load.py --model simple --concurrency 8,64 --protocols http-binary,http-json \
        --duration 5 --repeats 4 --modelhost-variants "console-on:;console-off:--http-console=false"
"""

from __future__ import annotations

import timeit

from modelhost.observability.stats import LatencyHistogram, ModelStats, RequestTiming


def best_ns(statement: str, namespace: dict[str, object], number: int) -> float:
    return min(timeit.repeat(statement, globals=namespace, number=number, repeat=5)) / number * 1e9


def main() -> None:
    histogram = LatencyHistogram()
    stats = ModelStats("m", "1")
    timing = RequestTiming()
    add = best_ns("h.add(1_234_567)", {"h": histogram}, 1_000_000)
    succeeded = best_ns("s.succeeded(1_234_567, t)", {"s": stats, "t": timing}, 500_000)
    print(f"LatencyHistogram.add          {add:6.0f} ns per request")
    print(f"ModelStats.succeeded (with it) {succeeded:6.0f} ns per request")


if __name__ == "__main__":
    main()
