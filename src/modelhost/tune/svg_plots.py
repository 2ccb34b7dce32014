"""The SVG plots of the HTML report: throughput against p99 latency (a dot per point, the Pareto front, the
chosen point, the constraints), and the latency breakdown of the best configurations."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from modelhost.tune.figure_data import (
    LEGEND_ROWS,
    PARETO_COLOUR,
    SEGMENT_COLOURS,
    SEGMENTS,
    breakdown,
    colours,
    name_of,
    tooltip,
)
from modelhost.tune.goal import pareto_front
from modelhost.tune.point import Point
from modelhost.tune.results import Results

WIDTH, HEIGHT, MARGIN = 900, 460, 64
LEGEND_WIDTH = 240  # the right-hand column of the scatter plot
BAR_ROW, BAR_HEIGHT, BAR_TOP = 44, 20, 56


def axis(value: float) -> tuple[float, float]:
    """The end of an axis showing 0 to `value` (with a little room above it) and the step of its ticks: 1, 2,
    2.5 or 5 times a power of ten, about six ticks."""
    if not value > 0 or math.isinf(value):
        return 1.0, 0.2
    rough = value * 1.05 / 6
    magnitude = 10.0 ** math.floor(math.log10(rough))
    step = next(f * magnitude for f in (1, 2, 2.5, 5, 10) if rough <= f * magnitude * (1 + 1e-9))
    return step * math.ceil(value * 1.05 / step - 1e-9), step


@dataclass(frozen=True, slots=True)
class _Frame:
    """The plot area of an SVG and the data range it shows (from 0 to x_max and y_max)."""

    left: float
    top: float
    width: float
    height: float
    x_max: float
    x_step: float
    y_max: float
    y_step: float

    def x(self, value: float) -> float:
        return self.left + value / self.x_max * self.width

    def y(self, value: float) -> float:
        return self.top + self.height - value / self.y_max * self.height


def _ticks(end: float, step: float) -> list[float]:
    return [round(step * i, 9) for i in range(round(end / step) + 1)]


def _x_ticks(frame: _Frame) -> list[str]:
    """Vertical grid lines, with their values under the plot area."""
    parts = []
    bottom = frame.top + frame.height
    for gx in _ticks(frame.x_max, frame.x_step):
        x = frame.x(gx)
        parts.append(f'<line x1="{x:.1f}" y1="{frame.top}" x2="{x:.1f}" y2="{bottom}" stroke="#eee"/>')
        parts.append(f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">{escape(f"{gx:g}")}</text>')
    return parts


def _axes(frame: _Frame, x_label: str, y_label: str) -> list[str]:
    right, bottom = frame.left + frame.width, frame.top + frame.height
    parts: list[str] = [
        f'<rect class="plot-area" x="{frame.left}" y="{frame.top}" width="{frame.width}" height="{frame.height}" '
        'fill="none" stroke="#888"/>'
    ]
    parts += _x_ticks(frame)
    for gy in _ticks(frame.y_max, frame.y_step):
        y = frame.y(gy)
        parts.append(f'<line x1="{frame.left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#eee"/>')
        parts.append(
            f'<text x="{frame.left - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(f"{gy:g}")}</text>'
        )
    middle_y = frame.top + frame.height / 2
    parts.append(
        f'<text x="{frame.left + frame.width / 2}" y="{bottom + 38}" text-anchor="middle">{escape(x_label)}</text>'
    )
    parts.append(
        f'<text x="16" y="{middle_y}" text-anchor="middle" transform="rotate(-90 16 {middle_y})">'
        f"{escape(y_label)}</text>"
    )
    return parts


def _limits(results: Results, frame: _Frame) -> list[str]:
    """The latency budget (a dashed vertical line) and the minimum throughput (a dashed horizontal one)."""
    parts = []
    budget, floor = results.goal.latency_budget_ms, results.goal.min_throughput
    if budget is not None:
        x = frame.x(budget)
        anchor, dx = ("end", -4) if x > frame.left + frame.width * 0.7 else ("start", 4)
        parts.append(
            f'<line class="latency-budget" x1="{x:.1f}" y1="{frame.top}" x2="{x:.1f}" '
            f'y2="{frame.top + frame.height}" stroke="#a40000" stroke-dasharray="6 4" stroke-width="1.5"/>'
        )
        parts.append(
            f'<text x="{x + dx:.1f}" y="{frame.top + 14}" text-anchor="{anchor}" fill="#a40000">'
            f"{escape(f'latency budget {budget:g} ms')}</text>"
        )
    if floor is not None:
        y = frame.y(floor)
        parts.append(
            f'<line class="min-throughput" x1="{frame.left}" y1="{y:.1f}" x2="{frame.left + frame.width}" '
            f'y2="{y:.1f}" stroke="#a40000" stroke-dasharray="2 4" stroke-width="1.5"/>'
        )
        parts.append(
            f'<text x="{frame.left + frame.width - 4}" y="{y - 5:.1f}" text-anchor="end" fill="#a40000">'
            f"{escape(f'min throughput {floor:g} infer/sec')}</text>"
        )
    return parts


def _pareto(results: Results, frame: _Frame) -> str:
    front = pareto_front(results.points)
    path = " ".join(f"{frame.x(p.p99_ms):.1f},{frame.y(p.throughput):.1f}" for p in front)
    return (
        f'<polyline class="pareto-front" points="{path}" fill="none" stroke="{PARETO_COLOUR}" '
        'stroke-width="1.5" stroke-dasharray="8 3"/>'
    )


def _dots(results: Results, frame: _Frame, palette: dict[str, str]) -> list[str]:
    return [
        f'<circle class="point" cx="{frame.x(p.p99_ms):.1f}" cy="{frame.y(p.throughput):.1f}" r="4" '
        f'fill="{palette[p.variant]}" fill-opacity="0.85"><title>{escape(tooltip(results, p))}</title></circle>'
        for p in results.points
    ]


def _chosen_mark(results: Results, frame: _Frame) -> list[str]:
    chosen = results.chosen
    if chosen is None:
        return []
    x, y = frame.x(chosen.p99_ms), frame.y(chosen.throughput)
    anchor, dx = ("end", -12) if x > frame.left + frame.width * 0.7 else ("start", 12)
    return [
        f'<circle class="chosen" cx="{x:.1f}" cy="{y:.1f}" r="10" fill="none" stroke="#000" stroke-width="2">'
        f"<title>chosen: {escape(tooltip(results, chosen))}</title></circle>",
        f'<text class="chosen-label" x="{x + dx:.1f}" y="{y - 10:.1f}" text-anchor="{anchor}" '
        'font-weight="bold">chosen</text>',
    ]


def _scatter_legend(results: Results, palette: dict[str, str], left: float) -> list[str]:
    y = MARGIN + 4
    parts = [
        f'<line x1="{left}" y1="{y}" x2="{left + 22}" y2="{y}" stroke="{PARETO_COLOUR}" stroke-width="1.5" '
        'stroke-dasharray="8 3"/>',
        f'<text x="{left + 28}" y="{y + 4}">Pareto front</text>',
    ]
    names = {p.variant: name_of(results, p) for p in results.points}
    keys = list(palette)
    for i, key in enumerate(keys[:LEGEND_ROWS]):
        row = y + 18 * (i + 1)
        parts.append(f'<circle cx="{left + 11}" cy="{row}" r="4" fill="{palette[key]}"/>')
        parts.append(f'<text x="{left + 28}" y="{row + 4}">{escape(names[key])}</text>')
    if len(keys) > LEGEND_ROWS:
        row = y + 18 * (LEGEND_ROWS + 1)
        parts.append(
            f'<text x="{left + 28}" y="{row + 4}">{escape(f"and {len(keys) - LEGEND_ROWS} more")}</text>'
        )
    return parts


def _svg_open(element_id: str, height: float, title: str) -> str:
    return (
        f'<svg id="{element_id}" width="{WIDTH}" height="{height:.0f}" viewBox="0 0 {WIDTH} {height:.0f}" '
        f'font-family="sans-serif" font-size="12" role="img" aria-label="{escape(title)}">'
        f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>'
    )


def throughput_svg(results: Results) -> str:
    """Throughput against p99 latency: a dot per point coloured by configuration, the Pareto front, the
    chosen point and the constraints."""
    points = results.points
    goal = results.goal
    x_values = [p.p99_ms for p in points] + [goal.latency_budget_ms or 0.0]
    y_values = [p.throughput for p in points] + [goal.min_throughput or 0.0]
    frame = _Frame(
        MARGIN,
        MARGIN,
        WIDTH - MARGIN - LEGEND_WIDTH,
        HEIGHT - 2 * MARGIN,
        *axis(max(x_values)),
        *axis(max(y_values)),
    )
    palette = colours(results)
    parts = [_svg_open("throughput-vs-p99", HEIGHT, f"{results.model}: throughput against p99 latency")]
    parts += _axes(frame, "p99 latency (ms)", "throughput (infer/sec)")
    parts += _limits(results, frame)
    parts.append(_pareto(results, frame))
    parts += _dots(results, frame, palette)
    parts += _chosen_mark(results, frame)
    parts += _scatter_legend(results, palette, WIDTH - LEGEND_WIDTH + 20)
    parts.append("</svg>")
    return "\n".join(parts)


# Plot 2: where the time of a request goes, for the best configurations.


def _breakdown_legend() -> list[str]:
    parts = []
    for i, (name, colour) in enumerate(zip(SEGMENTS, SEGMENT_COLOURS, strict=True)):
        x = MARGIN + 150 * i
        parts.append(f'<rect x="{x}" y="34" width="12" height="12" fill="{colour}"/>')
        parts.append(f'<text x="{x + 18}" y="44">{escape(name)}</text>')
    return parts


def _bar(results: Results, point: Point, frame: _Frame, row: int) -> list[str]:
    top = frame.top + BAR_ROW * row + (BAR_ROW - BAR_HEIGHT)
    parts = [
        f'<text class="bar-label" x="{frame.left}" y="{top - 5}">'
        f"{escape(f'{name_of(results, point)} (concurrency {point.concurrency})')}</text>"
    ]
    start = 0.0
    for (name, value), colour in zip(breakdown(point), SEGMENT_COLOURS, strict=True):
        x, width = frame.x(start), value / frame.x_max * frame.width
        parts.append(
            f'<rect class="segment" x="{x:.1f}" y="{top}" width="{width:.1f}" height="{BAR_HEIGHT}" '
            f'fill="{colour}"><title>{escape(f"{name}: {value:.3f} ms")}</title></rect>'
        )
        start += value
    parts.append(
        f'<text x="{frame.x(start) + 6:.1f}" y="{top + BAR_HEIGHT - 5}">{escape(f"{start:.2f} ms")}</text>'
    )
    return parts


def breakdown_svg(results: Results, points: Sequence[Point]) -> str:
    """A stacked horizontal bar of each point's average latency: server queue, compute input, infer and
    output, and the rest."""
    rows = BAR_ROW * max(len(points), 1)
    total = max((sum(v for _, v in breakdown(p)) for p in points), default=0.0)
    frame = _Frame(MARGIN, BAR_TOP, WIDTH - 2 * MARGIN - 40, rows, *axis(total), 1.0, 1.0)
    parts = [
        _svg_open("latency-breakdown", BAR_TOP + rows + 50, f"{results.model}: average latency breakdown")
    ]
    parts += _breakdown_legend()
    parts += _x_ticks(frame)
    bottom = frame.top + frame.height
    parts.append(
        f'<text x="{frame.left + frame.width / 2}" y="{bottom + 36}" text-anchor="middle">'
        "average latency (ms)</text>"
    )
    for row, point in enumerate(points):
        parts += _bar(results, point, frame, row)
    parts.append("</svg>")
    return "\n".join(parts)
