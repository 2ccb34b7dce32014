"""PNG plots of a tuning run (matplotlib, the optional `plot` extra): the report's throughput against p99
latency and its latency breakdown, for slides and tickets."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from modelhost.tune.figure_data import (
    BREAKDOWN_COUNT,
    LEGEND_ROWS,
    PARETO_COLOUR,
    SEGMENT_COLOURS,
    breakdown,
    colours,
    name_of,
)
from modelhost.tune.goal import pareto_front
from modelhost.tune.results import Results

THROUGHPUT_FILENAME = "throughput_vs_p99.png"
BREAKDOWN_FILENAME = "latency_breakdown.png"
INSTALL_NOTE = "pip install 'modelhost[plot]'"


def _pyplot() -> Any | None:
    """matplotlib.pyplot drawing to files, or None when matplotlib is not installed."""
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        return importlib.import_module("matplotlib.pyplot")
    except ImportError:
        return None


def _limits(axes: Any, results: Results) -> None:
    goal = results.goal
    if goal.latency_budget_ms is not None:
        axes.axvline(
            goal.latency_budget_ms,
            color="#a40000",
            linestyle="--",
            label=f"latency budget {goal.latency_budget_ms:g} ms",
        )
    if goal.min_throughput is not None:
        axes.axhline(
            goal.min_throughput,
            color="#a40000",
            linestyle=":",
            label=f"min throughput {goal.min_throughput:g} infer/sec",
        )


def _throughput_figure(plt: Any, results: Results, path: Path) -> None:
    figure, axes = plt.subplots(figsize=(10, 5.5))
    palette = colours(results)
    for i, (key, colour) in enumerate(palette.items()):
        points = [p for p in results.points if p.variant == key]
        label = name_of(results, points[0]) if i < LEGEND_ROWS else None
        axes.scatter(
            [p.p99_ms for p in points], [p.throughput for p in points], color=colour, s=24, label=label
        )
    front = pareto_front(results.points)
    if front:
        axes.plot(
            [p.p99_ms for p in front],
            [p.throughput for p in front],
            color=PARETO_COLOUR,
            linestyle="--",
            linewidth=1.2,
            label="Pareto front",
        )
    chosen = results.chosen
    if chosen is not None:
        axes.scatter(
            [chosen.p99_ms], [chosen.throughput], s=220, facecolors="none", edgecolors="black", linewidths=2
        )
        axes.annotate(
            "chosen",
            (chosen.p99_ms, chosen.throughput),
            xytext=(10, 10),
            textcoords="offset points",
            weight="bold",
        )
    else:
        axes.text(0.5, 0.5, "No points measured", ha="center", va="center", transform=axes.transAxes)
    _limits(axes, results)
    axes.set_xlim(left=0)
    axes.set_ylim(bottom=0)
    axes.set_xlabel("p99 latency (ms)")
    axes.set_ylabel("throughput (infer/sec)")
    axes.set_title(f"{results.model}: throughput against p99 latency")
    axes.grid(True, alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _breakdown_figure(plt: Any, results: Results, path: Path) -> None:
    points = results.top(BREAKDOWN_COUNT)
    figure, axes = plt.subplots(figsize=(10, 1.5 + 0.6 * max(len(points), 1)))
    labels = [f"{name_of(results, p)} (concurrency {p.concurrency})" for p in points]
    rows = [breakdown(p) for p in points]
    starts = [0.0] * len(points)
    for index, colour in enumerate(SEGMENT_COLOURS):
        widths = [row[index][1] for row in rows]
        name = rows[0][index][0] if rows else ""
        axes.barh(range(len(points)), widths, left=starts, color=colour, label=name)
        starts = [s + w for s, w in zip(starts, widths, strict=True)]
    if not points:
        axes.text(0.5, 0.5, "No points measured", ha="center", va="center", transform=axes.transAxes)
    axes.set_yticks(range(len(points)), labels)
    axes.invert_yaxis()  # the best configuration at the top
    axes.set_xlabel("average latency (ms)")
    axes.set_title(f"{results.model}: average latency breakdown")
    axes.grid(True, axis="x", alpha=0.3)
    if points:
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write_pngs(directory: Path, results: Results) -> list[str]:
    """Writes DIRECTORY/throughput_vs_p99.png and DIRECTORY/latency_breakdown.png when matplotlib is installed;
    returns notes for the user."""
    plt = _pyplot()
    if plt is None:
        return [
            f"{directory / THROUGHPUT_FILENAME} and {directory / BREAKDOWN_FILENAME} not written: matplotlib is not "
            f"installed ({INSTALL_NOTE})"
        ]
    directory.mkdir(parents=True, exist_ok=True)
    notes = []
    for filename, draw in (
        (THROUGHPUT_FILENAME, _throughput_figure),
        (BREAKDOWN_FILENAME, _breakdown_figure),
    ):
        path = directory / filename
        draw(plt, results, path)
        notes.append(f"Wrote {path}")
    return notes
