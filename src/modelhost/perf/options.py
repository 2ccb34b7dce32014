"""The command line of `modelhost perf`: perf_analyzer's options, in perf_analyzer's forms."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from modelhost.perf.command import non_negative_float, positive_int

Protocol = Literal["http", "grpc"]
TensorFormat = Literal["binary", "json"]

DEFAULT_PERCENTILES = (50, 90, 95, 99)
# Concurrency given as start:0 (no end) stops at the latency threshold, or here at the latest.
UNBOUNDED_CONCURRENCY = 4096
# --sequence-id-range with no end: ids up to Triton's uint64 (kept within int64 for the gRPC int64_param).
MAX_SEQUENCE_ID = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Range:
    start: float
    end: float
    step: float

    def values(self, unbounded: float) -> list[float]:
        end = unbounded if self.end == 0 else self.end
        out: list[float] = []
        value = self.start
        while value <= end + 1e-9:
            out.append(value)
            value += self.step
        return out


@dataclass(frozen=True, slots=True)
class PerfOptions:
    model: str
    version: str = ""
    url: str = "localhost:8000"
    protocol: Protocol = "http"
    batch_size: int = 1
    shapes: dict[str, list[int]] = field(default_factory=dict)
    input_data: str = "random"
    string_length: int = 128
    string_data: str | None = None
    concurrency: Range | None = None
    request_rate: Range | None = None
    distribution: Literal["constant", "poisson"] = "constant"
    interval_ms: int = 5000
    stability_pct: float = 10.0
    max_trials: int = 10
    percentile: int = -1
    latency_threshold_ms: float = 0.0
    input_format: TensorFormat = "binary"
    output_format: TensorFormat = "binary"
    csv_file: str | None = None
    verbose_csv: bool = False
    profile_export_file: str | None = None
    plot_prefix: str | None = None
    processes: int = 0  # 0 = chosen from the load
    verbose: bool = False
    sequence_length: int = 20
    sequence_length_variation: float = 20.0
    sequence_id_range: tuple[int, int] = (1, MAX_SEQUENCE_ID)  # start, end (excluded)
    streaming: bool = False
    shared_memory: Literal["none", "system"] = "none"
    output_shm_size: int = 102400
    progress: bool | None = None  # None = when stderr is a terminal

    @property
    def is_concurrency(self) -> bool:
        return self.request_rate is None

    @property
    def load_values(self) -> list[float]:
        if self.request_rate is not None:
            return self.request_rate.values(self.request_rate.start)
        assert self.concurrency is not None
        return self.concurrency.values(UNBOUNDED_CONCURRENCY)

    @property
    def percentiles(self) -> tuple[int, ...]:
        if self.percentile > 0 and self.percentile not in DEFAULT_PERCENTILES:
            return tuple(sorted((*DEFAULT_PERCENTILES, self.percentile)))
        return DEFAULT_PERCENTILES

    def worker_count(self) -> int:
        if self.processes > 0:
            return self.processes
        cores = os.cpu_count() or 1
        if self.request_rate is not None:
            need = math.ceil(max(self.load_values) / 4000)
        else:
            values = self.load_values
            need = math.ceil(max(values) / 16) if values else 1
        return max(1, min(cores, need))


class _Parser(argparse.ArgumentParser):
    pass


def parse_range(text: str, integer: bool) -> Range:
    """perf_analyzer's `start[:end[:step]]`; end defaults to start, step to 1; end 0 means "no end"."""
    parts = text.split(":")
    if not 1 <= len(parts) <= 3 or any(not p.strip() for p in parts):
        raise argparse.ArgumentTypeError(f"expected start:end:step, got {text!r}")
    try:
        numbers = [int(p) if integer else float(p) for p in parts]
    except ValueError:
        kind = "integers" if integer else "numbers"
        raise argparse.ArgumentTypeError(f"expected {kind} start:end:step, got {text!r}") from None
    start = numbers[0]
    end = numbers[1] if len(numbers) > 1 else start
    step = numbers[2] if len(numbers) > 2 else 1
    if start <= 0:
        raise argparse.ArgumentTypeError(f"the start of the range must be positive: {text!r}")
    if step <= 0:
        raise argparse.ArgumentTypeError(f"the step of the range must be positive: {text!r}")
    if end != 0 and end < start:
        raise argparse.ArgumentTypeError(f"the end of the range is below its start: {text!r}")
    return Range(float(start), float(end), float(step))


def parse_shape(text: str) -> tuple[str, list[int]]:
    """`NAME:d1,d2,...` (the name may itself hold colons: the last one splits)."""
    name, sep, dims = text.rpartition(":")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME:d1,d2,..., got {text!r}")
    try:
        values = [int(d) for d in dims.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME:d1,d2,... with integer dims, got {text!r}") from None
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"dims must not be negative: {text!r}")
    return name, values


def parse_id_range(text: str) -> tuple[int, int]:
    """perf_analyzer's `start[:end]`: sequence ids from start to end (excluded); no end = no bound."""
    start, _, end = text.partition(":")
    try:
        first = int(start)
        last = int(end) if end else MAX_SEQUENCE_ID
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected start[:end], got {text!r}") from None
    if first < 1 or last <= first or last > MAX_SEQUENCE_ID:
        raise argparse.ArgumentTypeError(f"expected 1 <= start < end (end excluded), got {text!r}")
    return first, last


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="modelhost perf",
        description="Measure a model's throughput and latency on a Triton-compatible server "
        "(perf_analyzer's options and report).",
    )
    p.add_argument("-m", dest="model", required=True, help="model name (required)")
    p.add_argument("-x", dest="version", default="", help="model version (default: the server's choice)")
    p.add_argument("-u", dest="url", default=None, help="server host:port (localhost:8000 http, :8001 grpc)")
    p.add_argument(
        "-i", dest="protocol", default="http", type=str.lower, choices=("http", "grpc"), help="protocol"
    )
    p.add_argument("-b", dest="batch_size", type=positive_int, default=1, help="batch size (1)")
    p.add_argument(
        "--shape",
        dest="shapes",
        action="append",
        type=parse_shape,
        default=[],
        metavar="NAME:d1,d2",
        help="shape of an input with variable dimensions, without the batch dimension (repeatable)",
    )
    p.add_argument(
        "--input-data",
        default="random",
        metavar="zero|random|FILE.json",
        help="input values: zero, random (default) or perf_analyzer's JSON input-data file",
    )
    p.add_argument("--string-length", type=positive_int, default=128, help="length of random strings")
    p.add_argument("--string-data", default=None, help="the string sent in every BYTES element")
    p.add_argument(
        "--concurrency-range",
        type=lambda t: parse_range(t, True),
        default=None,
        metavar="start:end:step",
        help="closed-loop concurrency levels (1:1:1); end 0 = until the latency threshold",
    )
    p.add_argument(
        "--request-rate-range",
        type=lambda t: parse_range(t, False),
        default=None,
        metavar="start:end:step",
        help="open-loop request rates in requests/s",
    )
    p.add_argument("--request-distribution", choices=("constant", "poisson"), default="constant")
    p.add_argument(
        "-p", "--measurement-interval", dest="interval_ms", type=positive_int, default=5000, metavar="MS"
    )
    p.add_argument(
        "-s", "--stability-percentage", dest="stability_pct", type=non_negative_float, default=10.0, metavar="PCT"
    )
    p.add_argument("-r", "--max-trials", dest="max_trials", type=positive_int, default=10)
    p.add_argument(
        "--percentile",
        type=int,
        default=-1,
        help="latency percentile used for stability and reports (-1 = average)",
    )
    p.add_argument(
        "-l",
        "--latency-threshold",
        dest="latency_threshold_ms",
        type=non_negative_float,
        default=0.0,
        metavar="MS",
        help="stop the sweep once the latency exceeds this (0 = no threshold)",
    )
    p.add_argument("--input-tensor-format", choices=("binary", "json"), default="binary")
    p.add_argument("--output-tensor-format", choices=("binary", "json"), default="binary")
    p.add_argument("-f", dest="csv_file", default=None, metavar="FILE.csv", help="write perf_analyzer's CSV")
    p.add_argument("--verbose-csv", action="store_true", help="add the verbose CSV columns")
    p.add_argument("--profile-export-file", default=None, metavar="FILE.json")
    p.add_argument(
        "--plot", dest="plot_prefix", default=None, metavar="PREFIX", help="write PREFIX.html and PREFIX.png"
    )
    p.add_argument("--processes", type=positive_int, default=0, help="load-generator processes (auto)")
    p.add_argument("--sequence-length", type=positive_int, default=20, help="requests per sequence")
    p.add_argument(
        "--sequence-length-variation",
        type=non_negative_float,
        default=20.0,
        metavar="PCT",
        help="sequence lengths vary within +/- this percentage of --sequence-length (20)",
    )
    p.add_argument(
        "--sequence-id-range",
        type=parse_id_range,
        default=(1, MAX_SEQUENCE_ID),
        metavar="start[:end]",
        help="sequence ids used, from start to end (excluded); default 1 with no end",
    )
    p.add_argument("--streaming", action="store_true", help="gRPC only: send requests on ModelStreamInfer")
    p.add_argument(
        "--shared-memory",
        dest="shared_memory",
        type=str.lower,
        choices=("none", "system", "cuda"),
        default="none",
        help="inputs and outputs in shared memory: none (default) or system",
    )
    p.add_argument(
        "--output-shared-memory-size",
        dest="output_shm_size",
        type=positive_int,
        default=102400,
        metavar="BYTES",
        help="shared memory per output tensor and batch element (102400)",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--async", dest="async_", action="store_true", help="accepted (always asynchronous)")
    mode.add_argument("--sync", action="store_true", help="accepted (each slot waits for its answer)")
    progress = p.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None)
    progress.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("-v", dest="verbose", action="store_true", help="print every measurement window")
    return p


def parse_args(argv: Sequence[str]) -> PerfOptions:
    """The options of `modelhost perf ARGV`; bad flags end in argparse's error (SystemExit 2)."""
    parser = build_parser()
    a = parser.parse_args(list(argv))
    if a.concurrency_range is not None and a.request_rate_range is not None:
        parser.error("--concurrency-range and --request-rate-range cannot be given together")
    if a.percentile != -1 and not 0 < a.percentile < 100:
        parser.error("--percentile must be -1 (average) or between 1 and 99")
    concurrency = a.concurrency_range
    if a.request_rate_range is None and concurrency is None:
        concurrency = Range(1, 1, 1)
    if concurrency is not None and concurrency.end == 0 and a.latency_threshold_ms == 0:
        parser.error("a concurrency range with no end (start:0) needs --latency-threshold")
    if a.request_rate_range is not None and a.request_rate_range.end == 0:
        parser.error("--request-rate-range needs an end")
    url = a.url or ("localhost:8001" if a.protocol == "grpc" else "localhost:8000")
    if a.protocol == "grpc" and (a.input_tensor_format != "binary" or a.output_tensor_format != "binary"):
        parser.error("--input-tensor-format/--output-tensor-format json are for -i http only")
    if a.streaming and a.protocol != "grpc":
        parser.error("--streaming is only valid with -i grpc")
    if a.shared_memory == "cuda":
        parser.error("--shared-memory cuda is not supported: use system or none")
    return PerfOptions(
        model=a.model,
        version=a.version,
        url=url,
        protocol=a.protocol,
        batch_size=a.batch_size,
        shapes=dict(a.shapes),
        input_data=a.input_data,
        string_length=a.string_length,
        string_data=a.string_data,
        concurrency=concurrency,
        request_rate=a.request_rate_range,
        distribution=a.request_distribution,
        interval_ms=a.interval_ms,
        stability_pct=a.stability_pct,
        max_trials=a.max_trials,
        percentile=a.percentile,
        latency_threshold_ms=a.latency_threshold_ms,
        input_format=a.input_tensor_format,
        output_format=a.output_tensor_format,
        csv_file=a.csv_file,
        verbose_csv=a.verbose_csv,
        profile_export_file=a.profile_export_file,
        plot_prefix=a.plot_prefix,
        processes=a.processes,
        verbose=a.verbose,
        sequence_length=a.sequence_length,
        sequence_length_variation=a.sequence_length_variation,
        sequence_id_range=a.sequence_id_range,
        streaming=a.streaming,
        shared_memory=a.shared_memory,
        output_shm_size=a.output_shm_size,
        progress=a.progress,
    )
