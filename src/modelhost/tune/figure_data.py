"""What the HTML report and the PNG plots of a tuning run both show of it: each configuration's name,
description and colour, a point's latency in parts, the constraints in words, and how many configurations the
legends and the breakdown hold."""

from __future__ import annotations

from modelhost.tune.point import Point
from modelhost.tune.results import Results

COLOURS = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    # tab20's lighter shades: a quick search measures 10 to 20 variants
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#c7c7c7",
    "#dbdb8d",
    "#9edae5",
]
# The parts of a request's average latency, in the order the bars stack them.
SEGMENTS = ("server queue", "compute input", "compute infer", "compute output", "other")
SEGMENT_COLOURS = ("#9ecae1", "#fdae6b", "#e6550d", "#fdd0a2", "#bdbdbd")
PARETO_COLOUR = "#000000"
LEGEND_ROWS = 20  # configurations named in a scatter plot's legend; the rest are counted
BREAKDOWN_COUNT = 5  # the best configurations whose latency breakdown is drawn


def name_of(results: Results, point: Point) -> str:
    record = results.state.variants.get(point.variant)
    return record.name if record is not None else point.variant


def describe(results: Results, point: Point) -> str:
    record = results.state.variants.get(point.variant)
    return record.variant.describe(results.thread_parameter) if record is not None else point.variant


def colours(results: Results) -> dict[str, str]:
    """A colour for each measured variant, in the order the run measured them."""
    measured = {p.variant for p in results.points}
    keys = [k for k in results.state.variants if k in measured]
    keys += sorted(measured - set(keys))
    return {key: COLOURS[i % len(COLOURS)] for i, key in enumerate(keys)}


def breakdown(point: Point) -> list[tuple[str, float]]:
    """The average latency in parts (ms): the server's queue and compute, and the rest (network, client and
    server overhead)."""
    other = max(0.0, point.avg_ms - point.queue_ms - point.compute_ms)
    values = (point.queue_ms, point.compute_input_ms, point.compute_infer_ms, point.compute_output_ms, other)
    return [(name, max(0.0, value)) for name, value in zip(SEGMENTS, values, strict=True)]


def tooltip(results: Results, point: Point) -> str:
    return (
        f"{name_of(results, point)}, concurrency {point.concurrency}: {point.throughput:.1f} infer/sec, "
        f"p99 {point.p99_ms:.2f} ms"
    )


def constraints_text(results: Results) -> str:
    goal = results.goal
    parts = []
    if goal.latency_budget_ms is not None:
        parts.append(f"p99 latency at most {goal.latency_budget_ms:g} ms")
    if goal.min_throughput is not None:
        parts.append(f"throughput at least {goal.min_throughput:g} infer/sec")
    return ", ".join(parts) if parts else "none"
