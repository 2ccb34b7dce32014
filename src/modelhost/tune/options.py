"""The command line of `modelhost tune`."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from modelhost.perf.command import positive_float, positive_int
from modelhost.tune.prices import parse_price
from modelhost.tune.space import MAX_CONCURRENCY, MAX_INSTANCE_COUNT, MAX_MODEL_BATCH_SIZE

Objective = Literal["throughput", "latency", "cost"]
Search = Literal["quick", "brute"]

DEFAULT_TIME_LIMIT_S = 600.0


@dataclass(frozen=True, slots=True)
class TuneOptions:
    model: str
    model_repository: str | None = None
    url: str | None = None  # a running server (host:port, HTTP); None = start one
    metrics_url: str | None = None
    latency_budget_ms: float | None = None
    min_throughput: float | None = None
    objective: Objective = "throughput"
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    search: Search = "quick"
    output: str = ""
    resume: bool = False
    overwrite: bool = False
    price_per_hour: float | None = None
    price_label: str = ""
    max_instance_count: int = MAX_INSTANCE_COUNT
    max_model_batch_size: int = MAX_MODEL_BATCH_SIZE
    max_concurrency: int = MAX_CONCURRENCY
    measurement_interval_ms: int = 1000
    stability_percentage: float = 10.0
    max_trials: int = 8
    server_flags: list[str] = field(default_factory=list)
    progress: bool | None = None  # None = when stderr is a terminal


def parse_duration(text: str) -> float:
    """`90s`, `10m`, `1h`, `1h30m` or plain seconds."""
    value = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        seconds = float(value)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", value)
        if not parts or "".join(n + u for n, u in parts) != value:
            raise argparse.ArgumentTypeError(f"expected a duration such as 90s, 10m or 1h30m, got {text!r}")
        seconds = sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"the time limit must be positive, got {text!r}")
    return seconds


def _price(text: str) -> tuple[float, str]:
    try:
        return parse_price(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="modelhost tune",
        description="Find the model configuration (instances, batching, queue delay, threads) that serves a model "
        "best under a latency budget, by measuring variants on a server (Model Analyzer's job). See docs/tune.md.",
    )
    p.add_argument("-m", "--model", dest="model", required=True, help="the model to tune (required)")
    p.add_argument(
        "--model-repository",
        help="the repository holding the model (required unless --url); a local path, s3://, gs:// or as://",
    )
    p.add_argument(
        "--url",
        help="tune on this running server (host:port, HTTP) in explicit model-control mode instead of starting one",
    )
    p.add_argument(
        "--metrics-url",
        help="the metrics endpoint of the --url server (default: its host, port 8002, /metrics)",
    )
    p.add_argument(
        "--latency-budget-ms", type=positive_float, metavar="P99", help="the highest p99 latency to accept"
    )
    p.add_argument(
        "--min-throughput",
        type=positive_float,
        metavar="R",
        help="the lowest throughput (infer/sec) to accept",
    )
    p.add_argument(
        "--objective",
        choices=("throughput", "latency", "cost"),
        default="throughput",
        help="what the best configuration maximises or minimises within the constraints (default throughput; "
        "cost needs --instance-price)",
    )
    p.add_argument(
        "--time-limit",
        type=parse_duration,
        default=DEFAULT_TIME_LIMIT_S,
        metavar="DURATION",
        help="wall-clock limit of the whole run, e.g. 90s, 10m, 1h (default 10m)",
    )
    p.add_argument(
        "--search",
        choices=("quick", "brute"),
        default="quick",
        help="quick: hill-climbing from the current config; brute: Model Analyzer's automatic sweep (default quick)",
    )
    p.add_argument("--output", metavar="DIR", help="where results go (default tune_results/MODEL)")
    p.add_argument("--resume", action="store_true", help="continue the run whose checkpoint is in --output")
    p.add_argument(
        "--overwrite", action="store_true", help="start afresh even if --output holds a checkpoint"
    )
    p.add_argument(
        "--instance-price",
        type=_price,
        metavar="PER_HOUR|TYPE",
        help="the host's price per hour (or an EC2 instance type such as c6i.xlarge): cost per million inferences",
    )
    p.add_argument("--max-instance-count", type=positive_int, default=MAX_INSTANCE_COUNT, help="default 5")
    p.add_argument(
        "--max-model-batch-size", type=positive_int, default=MAX_MODEL_BATCH_SIZE, help="default 128"
    )
    p.add_argument("--max-concurrency", type=positive_int, default=MAX_CONCURRENCY, help="default 1024")
    p.add_argument(
        "--measurement-interval",
        type=positive_int,
        default=1000,
        metavar="MS",
        help="length of a measurement window in ms (default 1000)",
    )
    p.add_argument(
        "--stability-percentage",
        type=positive_float,
        default=10.0,
        help="the last three windows agree within this percentage (default 10)",
    )
    p.add_argument("--max-trials", type=positive_int, default=8, help="windows per point at most (default 8)")
    p.add_argument(
        "--server-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="a `modelhost serve` flag for the server the tuner starts, e.g. --server-flag=--frontend-processes=2 "
        "(repeatable)",
    )
    progress = p.add_mutually_exclusive_group()
    progress.add_argument(
        "--progress", dest="progress", action="store_true", default=None, help="a live progress line"
    )
    progress.add_argument(
        "--no-progress", dest="progress", action="store_false", help="one plain line per point"
    )
    return p


def parse_args(argv: Sequence[str]) -> TuneOptions:
    parser = build_parser()
    args = parser.parse_args(list(argv))
    if args.url is None and not args.model_repository:
        parser.error("--model-repository is required (or --url for a running server)")
    if args.url is not None and args.server_flag:
        parser.error("--server-flag applies to the server the tuner starts, not to a --url server")
    if args.objective == "cost" and args.instance_price is None:
        parser.error("--objective cost needs --instance-price")
    if args.resume and args.overwrite:
        parser.error("--resume and --overwrite exclude each other")
    metrics_url = args.metrics_url
    if args.url is not None and metrics_url is None:
        host = args.url.removeprefix("http://").rstrip("/").rpartition(":")[0] or args.url
        metrics_url = f"http://{host}:8002/metrics"
    price, label = args.instance_price if args.instance_price is not None else (None, "")
    return TuneOptions(
        model=args.model,
        model_repository=args.model_repository,
        url=args.url.removeprefix("http://").rstrip("/") if args.url else None,
        metrics_url=metrics_url,
        latency_budget_ms=args.latency_budget_ms,
        min_throughput=args.min_throughput,
        objective=args.objective,
        time_limit_s=args.time_limit,
        search=args.search,
        output=args.output or f"tune_results/{args.model}",
        resume=args.resume,
        overwrite=args.overwrite,
        price_per_hour=price,
        price_label=label,
        max_instance_count=args.max_instance_count,
        max_model_batch_size=args.max_model_batch_size,
        max_concurrency=args.max_concurrency,
        measurement_interval_ms=args.measurement_interval,
        stability_percentage=args.stability_percentage,
        max_trials=args.max_trials,
        server_flags=list(args.server_flag),
        progress=args.progress,
    )
