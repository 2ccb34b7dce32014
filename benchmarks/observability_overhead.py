#!/usr/bin/env python3
"""What observability costs in throughput: the `simple` example over HTTP binary with wrk, on a modelhost with
everything off, with metrics summaries and histograms on, and with tracing at rate 1 (every request traced,
TIMESTAMPS, Triton trace file), in alternating rounds; medians and ratios to "off" measured in the same run.

    .venv/bin/python benchmarks/observability_overhead.py --concurrency 8 --duration 8 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import loadgen  # noqa: E402
import payloads  # noqa: E402
from servers import Ports, Server, server_command  # noqa: E402

EXAMPLES = HERE.parent / "src" / "modelhost" / "examples"


def configs(workdir: Path) -> dict[str, list[str]]:
    return {
        "off": ["--allow-metrics=false", "--allow-cpu-metrics=false"],
        "metrics": ["--metrics-config=summary_latencies=true", "--metrics-config=histogram_latencies=true"],
        "tracing": [
            "--allow-metrics=false",
            "--trace-config=level=TIMESTAMPS",
            "--trace-config=rate=1",
            f"--trace-config=triton,file={workdir / 'trace.json'}",
            "--trace-config=triton,log-frequency=10000",
        ],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--duration", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    loadgen.require_tools(["http-binary"])
    workload = payloads.make_workload("simple")
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        bodies = loadgen.write_bodies(
            workdir / "bodies",
            "simple",
            payloads.binary_body(workload),
            payloads.json_body(workload),
            payloads.grpc_request(workload),
        )
        for _ in range(args.repeats):
            for name, flags in configs(workdir).items():
                ports = Ports.pick()
                command = [*server_command("modelhost", EXAMPLES, ports), *flags]
                server = Server(name, command, ports, workdir / f"{name}.log")
                server.start()
                try:
                    server.wait_ready(["simple"])
                    url = f"{server.http_url}/v2/models/simple/infer"
                    loadgen.run_wrk(url, bodies.binary_file, bodies.binary_header_len, args.concurrency, 2, 1)
                    result = loadgen.run_wrk(
                        url, bodies.binary_file, bodies.binary_header_len, args.concurrency, args.duration, 1
                    )
                finally:
                    server.stop()
                results.setdefault(name, []).append(result.rps)
                print(f"{name:8} {result.rps:8.0f} req/s", file=sys.stderr)
    off = statistics.median(results["off"])
    print(f"| configuration | median req/s (c={args.concurrency}) | runs | ratio to off |")
    print("|---|---|---|---|")
    for name, runs in results.items():
        median = statistics.median(runs)
        print(f"| {name} | {median:.0f} | {' / '.join(f'{r:.0f}' for r in runs)} | {median / off:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
