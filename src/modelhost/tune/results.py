"""What a run found, and the files that say it: the best config.pbtxt and its diff against the current one,
every variant's config, and every measured point as CSV with Model Analyzer's column names."""

from __future__ import annotations

import csv
import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format  # type: ignore[import-untyped]
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.tune.checkpoint import RunState, VariantRecord
from modelhost.tune.goal import Goal
from modelhost.tune.point import Point
from modelhost.tune.space import apply

CSV_FILENAME = "metrics-model-inference.csv"  # Model Analyzer's results/metrics-model-inference.csv
CONFIG_FILENAME = "config.pbtxt"
DIFF_FILENAME = "config.diff"
VARIANTS_DIRNAME = "variants"


@dataclass
class Results:
    model: str
    state: RunState
    goal: Goal
    search: str
    thread_parameter: str | None
    default_key: str  # Variant.key of the configuration the run started from
    wall_s: float
    stopped_by_time: bool
    price_label: str = ""

    @property
    def points(self) -> list[Point]:
        return list(self.state.points.values())

    def record_of(self, point: Point) -> VariantRecord:
        return self.state.variants[point.variant]

    @property
    def baseline(self) -> Point | None:
        """The starting configuration's best point (within the constraints, else its highest throughput)."""
        points = [p for p in self.points if p.variant == self.default_key]
        return self.goal.best(points) or max(points, key=lambda p: p.throughput, default=None)

    @property
    def chosen(self) -> Point | None:
        """The best point within the constraints, else the one that misses them least."""
        return self.goal.best(self.points) or self.goal.closest(self.points)

    @property
    def feasible(self) -> bool:
        return self.goal.best(self.points) is not None

    def top(self, count: int) -> list[Point]:
        """The best point of each variant, best variants first (those within the constraints before the rest)."""
        per_variant: dict[str, Point] = {}
        for point in self.points:
            current = per_variant.get(point.variant)
            ok = self.goal.satisfies(point)
            if current is None or (ok, self.goal.rank_key(point)) > (
                self.goal.satisfies(current),
                self.goal.rank_key(current),
            ):
                per_variant[point.variant] = point
        ranked = sorted(
            per_variant.values(), key=lambda p: (self.goal.satisfies(p), self.goal.rank_key(p)), reverse=True
        )
        return ranked[:count]

    @property
    def failures(self) -> list[VariantRecord]:
        return [r for r in self.state.variants.values() if r.failure or r.errors]


def config_text(config: ModelConfig) -> str:
    return str(text_format.MessageToString(config))


def write_configs(results: Results, base: ModelConfig, current_text: str, output: Path) -> Path | None:
    """DIR/variants/<name>/config.pbtxt for every variant measured; DIR/config.pbtxt for the chosen one, and
    DIR/config.diff from the current config (both in protobuf text format, so the diff shows only changes)."""
    for record in results.state.variants.values():
        directory = output / VARIANTS_DIRNAME / record.name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / CONFIG_FILENAME).write_text(
            config_text(apply(record.variant, base, results.thread_parameter))
        )
    chosen = results.chosen
    if chosen is None:
        return None
    best = config_text(apply(results.record_of(chosen).variant, base, results.thread_parameter))
    (output / CONFIG_FILENAME).write_text(best)
    diff = difflib.unified_diff(
        current_text.splitlines(keepends=True),
        best.splitlines(keepends=True),
        fromfile=f"a/{results.model}/config.pbtxt",
        tofile=f"b/{results.model}/config.pbtxt",
    )
    (output / DIFF_FILENAME).write_text("".join(diff))
    return output / CONFIG_FILENAME


# Model Analyzer's headers (result_table_manager.py and record/types), then modelhost's own columns.
CSV_COLUMNS = [
    "Model",
    "Batch",
    "Concurrency",
    "Model Config Path",
    "Instance Group",
    "Max Batch Size",
    "Satisfies Constraints",
    "Throughput (infer/sec)",
    "p99 Latency (ms)",
    "p95 Latency (ms)",
    "p90 Latency (ms)",
    "p50 Latency (ms)",
    "Avg Latency (ms)",
    "Server Queue time (ms)",
    "Server Compute Input time (ms)",
    "Server Compute Infer time (ms)",
    "Server Compute Output time (ms)",
    "Client Send/Recv (ms)",
    "Response Wait Time (ms)",
    "RAM Usage (MB)",
    "GPU Memory Usage (MB)",
    "GPU Utilization (%)",
    "Server CPU (cores)",
    "Dynamic Batching",
    "Max Queue Delay (us)",
    "Preferred Batch Sizes",
    "Backend Threads",
    "Cost per 1M Inferences (USD)",
    "Stable",
]


def _number(value: float | None, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def csv_rows(results: Results) -> list[list[str]]:
    rows: list[list[str]] = []
    for point in sorted(results.points, key=lambda p: (results.record_of(p).name, p.concurrency)):
        record = results.record_of(point)
        v = record.variant
        rows.append(
            [
                results.model,
                "1",
                str(point.concurrency),
                record.name,
                v.instance_group,
                str(v.max_batch_size),
                "Yes" if results.goal.satisfies(point) else "No",
                _number(point.throughput, 1),
                _number(point.p99_ms),
                _number(point.p95_ms),
                _number(point.p90_ms),
                _number(point.p50_ms),
                _number(point.avg_ms),
                _number(point.queue_ms),
                _number(point.compute_input_ms),
                _number(point.compute_infer_ms),
                _number(point.compute_output_ms),
                _number(point.send_recv_ms),
                _number(point.response_wait_ms),
                _number(point.ram_mb, 1),
                _number(point.gpu_memory_mb, 1),
                _number(point.gpu_utilization, 1),
                _number(point.cpu_cores, 2),
                "Yes" if v.dynamic_batching else "No",
                str(v.queue_delay_us) if v.dynamic_batching else "",
                " ".join(str(p) for p in v.preferred) if v.dynamic_batching else "",
                v.threads,
                _number(results.goal.cost(point), 4),
                "Yes" if point.stable else "No",
            ]
        )
    return rows


def write_csv(results: Results, path: Path) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        writer.writerows(csv_rows(results))


def summary_lines(results: Results, written: Sequence[Path]) -> list[str]:
    """The end of a run, for the terminal."""
    lines: list[str] = []
    chosen, baseline = results.chosen, results.baseline
    measured = len(results.points)
    lines.append(
        f"Measured {measured} point(s) of {len({p.variant for p in results.points})} configuration(s) in "
        f"{results.wall_s:.0f} s ({results.search} search"
        + (", stopped by the time limit)" if results.stopped_by_time else ")")
    )
    for record in results.failures:
        if record.failure:
            lines.append(
                f"  {record.name} ({record.variant.describe(results.thread_parameter)}) failed: {record.failure}"
            )
        for concurrency, error in sorted(record.errors.items()):
            lines.append(f"  {record.name} at concurrency {concurrency}: requests failed: {error}")
    if chosen is None:
        lines.append("No configuration could be measured.")
        return lines
    record = results.record_of(chosen)
    verdict = (
        "Best configuration" if results.feasible else "No configuration meets the constraints; the closest"
    )
    lines.append(
        f"{verdict}: {record.name}: {record.variant.describe(results.thread_parameter)}: "
        f"{chosen.throughput:.1f} infer/sec, p99 {chosen.p99_ms:.2f} ms at concurrency {chosen.concurrency}"
    )
    if baseline is not None and baseline.throughput > 0:
        lines.append(
            f"Starting configuration: {baseline.throughput:.1f} infer/sec, p99 {baseline.p99_ms:.2f} ms at "
            f"concurrency {baseline.concurrency}: the best is {chosen.throughput / baseline.throughput:.2f}x its "
            "throughput"
        )
    cost = results.goal.cost(chosen)
    if cost is not None:
        lines.append(f"Cost: {cost:.4f} USD per million inferences at {results.price_label}")
    lines += [f"Wrote {path}" for path in written]
    return lines
