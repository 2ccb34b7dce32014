"""The HTML report of a tuning run: one self-contained page (inline SVG plots and CSS, no script, nothing
fetched) with the chosen configuration, throughput against p99 latency with the Pareto front, the latency
breakdown of the best configurations, and tables of the best configurations, the failures and every point."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from modelhost.tune.goal import pareto_front
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
WIDTH, HEIGHT, MARGIN = 900, 460, 64
LEGEND_WIDTH = 240  # the right-hand column of the scatter plot
LEGEND_ROWS = 20  # configurations named in its legend; the rest are counted
BAR_ROW, BAR_HEIGHT, BAR_TOP = 44, 20, 56
TOP_COUNT, BREAKDOWN_COUNT = 10, 5
OBJECTIVES = {
    "throughput": "the highest throughput",
    "latency": "the lowest p99 latency",
    "cost": "the lowest cost per inference",
}
STYLE = (
    "body{font-family:sans-serif;margin:24px;color:#222}"
    "table{border-collapse:collapse;margin:8px 0 24px}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right;vertical-align:top}"
    "td.text,th.text{text-align:left}th{background:#f4f4f4}"
    ".warning{color:#a40000;font-weight:bold}svg{display:block;margin:8px 0 24px}"
)


def _e(text: object) -> str:
    return html.escape(str(text))


def _number(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def axis(value: float) -> tuple[float, float]:
    """The end of an axis showing 0 to `value` (with a little room above it) and the step of its ticks: 1, 2,
    2.5 or 5 times a power of ten, about six ticks."""
    if not value > 0 or math.isinf(value):
        return 1.0, 0.2
    rough = value * 1.05 / 6
    magnitude = 10.0 ** math.floor(math.log10(rough))
    step = next(f * magnitude for f in (1, 2, 2.5, 5, 10) if rough <= f * magnitude * (1 + 1e-9))
    return step * math.ceil(value * 1.05 / step - 1e-9), step


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


# The summary and the chosen configuration.


def _summary(results: Results) -> str:
    points = results.points
    configurations = len({p.variant for p in points})
    failed = sum(1 for r in results.state.variants.values() if r.failure)
    stopped = "stopped by the time limit" if results.stopped_by_time else "the search ran to its end"
    objective = OBJECTIVES.get(results.goal.objective, results.goal.objective)
    sentences = [
        f"Search: {results.search}; wall time {results.wall_s:.0f} s ({stopped}).",
        f"Measured {len(points)} point(s) of {configurations} configuration(s)"
        + (f"; {failed} configuration(s) failed." if failed else "."),
        f"Constraints: {constraints_text(results)}. Objective: {objective}.",
    ]
    if results.goal.price_per_hour is not None:
        sentences.append(f"Price: {results.price_label or f'{results.goal.price_per_hour:g} per hour'}.")
    return '<p id="summary">' + " ".join(_e(s) for s in sentences) + "</p>"


def _chosen_items(results: Results, chosen: Point) -> list[str]:
    items = [
        f"Throughput: {chosen.throughput:.1f} infer/sec",
        f"p99 latency: {chosen.p99_ms:.2f} ms",
        f"Concurrency: {chosen.concurrency}",
    ]
    baseline = results.baseline
    if baseline is not None and baseline.throughput > 0:
        items.append(
            f"{chosen.throughput / baseline.throughput:.2f}x the throughput of the starting configuration "
            f"({name_of(results, baseline)}: {baseline.throughput:.1f} infer/sec, p99 {baseline.p99_ms:.2f} ms "
            f"at concurrency {baseline.concurrency})"
        )
    cost = results.goal.cost(chosen)
    if cost is not None:
        items.append(f"Cost: {cost:.4f} USD per million inferences")
    return items


def _chosen_section(results: Results) -> str:
    chosen = results.chosen
    if chosen is None:
        return (
            '<section id="chosen"><h2>Chosen configuration</h2>'
            '<p class="warning">No configuration could be measured.</p></section>'
        )
    parts = ['<section id="chosen">']
    if results.feasible:
        parts.append("<h2>Chosen configuration</h2>")
    else:
        parts.append("<h2>Closest configuration</h2>")
        parts.append(
            '<p class="warning">'
            + _e(f"No configuration met the constraints ({constraints_text(results)}); this is the closest.")
            + "</p>"
        )
    parts.append(f"<p><strong>{_e(name_of(results, chosen))}</strong>: {_e(describe(results, chosen))}</p>")
    parts.append(
        "<ul>" + "".join(f"<li>{_e(item)}</li>" for item in _chosen_items(results, chosen)) + "</ul>"
    )
    parts.append("</section>")
    return "".join(parts)


# Plot 1: throughput against p99 latency.


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
        parts.append(f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">{_e(f"{gx:g}")}</text>')
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
        parts.append(f'<text x="{frame.left - 6}" y="{y + 4:.1f}" text-anchor="end">{_e(f"{gy:g}")}</text>')
    middle_y = frame.top + frame.height / 2
    parts.append(
        f'<text x="{frame.left + frame.width / 2}" y="{bottom + 38}" text-anchor="middle">{_e(x_label)}</text>'
    )
    parts.append(
        f'<text x="16" y="{middle_y}" text-anchor="middle" transform="rotate(-90 16 {middle_y})">'
        f"{_e(y_label)}</text>"
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
            f"{_e(f'latency budget {budget:g} ms')}</text>"
        )
    if floor is not None:
        y = frame.y(floor)
        parts.append(
            f'<line class="min-throughput" x1="{frame.left}" y1="{y:.1f}" x2="{frame.left + frame.width}" '
            f'y2="{y:.1f}" stroke="#a40000" stroke-dasharray="2 4" stroke-width="1.5"/>'
        )
        parts.append(
            f'<text x="{frame.left + frame.width - 4}" y="{y - 5:.1f}" text-anchor="end" fill="#a40000">'
            f"{_e(f'min throughput {floor:g} infer/sec')}</text>"
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
        f'fill="{palette[p.variant]}" fill-opacity="0.85"><title>{_e(tooltip(results, p))}</title></circle>'
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
        f"<title>chosen: {_e(tooltip(results, chosen))}</title></circle>",
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
        parts.append(f'<text x="{left + 28}" y="{row + 4}">{_e(names[key])}</text>')
    if len(keys) > LEGEND_ROWS:
        row = y + 18 * (LEGEND_ROWS + 1)
        parts.append(
            f'<text x="{left + 28}" y="{row + 4}">{_e(f"and {len(keys) - LEGEND_ROWS} more")}</text>'
        )
    return parts


def _svg_open(element_id: str, height: float, title: str) -> str:
    return (
        f'<svg id="{element_id}" width="{WIDTH}" height="{height:.0f}" viewBox="0 0 {WIDTH} {height:.0f}" '
        f'font-family="sans-serif" font-size="12" role="img" aria-label="{_e(title)}">'
        f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="15">{_e(title)}</text>'
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
        parts.append(f'<text x="{x + 18}" y="44">{_e(name)}</text>')
    return parts


def _bar(results: Results, point: Point, frame: _Frame, row: int) -> list[str]:
    top = frame.top + BAR_ROW * row + (BAR_ROW - BAR_HEIGHT)
    parts = [
        f'<text class="bar-label" x="{frame.left}" y="{top - 5}">'
        f"{_e(f'{name_of(results, point)} (concurrency {point.concurrency})')}</text>"
    ]
    start = 0.0
    for (name, value), colour in zip(breakdown(point), SEGMENT_COLOURS, strict=True):
        x, width = frame.x(start), value / frame.x_max * frame.width
        parts.append(
            f'<rect class="segment" x="{x:.1f}" y="{top}" width="{width:.1f}" height="{BAR_HEIGHT}" '
            f'fill="{colour}"><title>{_e(f"{name}: {value:.3f} ms")}</title></rect>'
        )
        start += value
    parts.append(
        f'<text x="{frame.x(start) + 6:.1f}" y="{top + BAR_HEIGHT - 5}">{_e(f"{start:.2f} ms")}</text>'
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


# The tables.


def _table(
    element_id: str, header: Sequence[str], rows: Sequence[Sequence[str]], text_columns: set[int]
) -> str:
    """A table of already escaped cells; the columns in `text_columns` align left."""

    def cell(tag: str, index: int, content: str) -> str:
        css = ' class="text"' if index in text_columns else ""
        return f"<{tag}{css}>{content}</{tag}>"

    head = "<tr>" + "".join(cell("th", i, _e(h)) for i, h in enumerate(header)) + "</tr>"
    body = "\n".join("<tr>" + "".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f'<table id="{element_id}">\n<thead>{head}</thead>\n<tbody>\n{body}\n</tbody>\n</table>'


def _yes_no(value: bool) -> str:
    return "yes" if value else "no"


def _top_table(results: Results) -> str:
    priced = results.goal.price_per_hour is not None
    header = [
        "Rank",
        "Configuration",
        "Description",
        "Concurrency",
        "Throughput (infer/sec)",
        "p99 (ms)",
        "p50 (ms)",
        "Server queue (ms)",
        "Server compute (ms)",
        "CPU (cores)",
        "RAM (MB)",
        "GPU memory (MB)",
    ]
    if priced:
        unit = f"USD, {results.price_label}" if results.price_label else "USD"
        header.append(f"Cost per 1M inferences ({unit})")
    header.append("Meets constraints")
    rows = []
    for rank, p in enumerate(results.top(TOP_COUNT), start=1):
        row = [str(rank), name_of(results, p), describe(results, p), str(p.concurrency)]
        row += [_number(p.throughput, 1), _number(p.p99_ms, 2), _number(p.p50_ms, 2)]
        row += [_number(p.queue_ms, 3), _number(p.compute_ms, 3), _number(p.cpu_cores, 2)]
        row += [_number(p.ram_mb, 1), _number(p.gpu_memory_mb, 1)]
        if priced:
            row.append(_number(results.goal.cost(p), 4))
        row.append(_yes_no(results.goal.satisfies(p)))
        rows.append([_e(c) for c in row])
    return _table("top-configurations", header, rows, {1, 2, len(header) - 1})


def _failures_table(results: Results) -> str:
    rows = []
    for record in results.failures:
        errors = "<br>".join(
            _e(f"concurrency {concurrency}: {error}") for concurrency, error in sorted(record.errors.items())
        )
        described = record.variant.describe(results.thread_parameter)
        rows.append([_e(record.name), _e(described), _e(record.failure), errors])
    return _table(
        "failures", ["Configuration", "Description", "Failure", "Request errors"], rows, {0, 1, 2, 3}
    )


def _points_table(results: Results) -> str:
    header = [
        "Configuration",
        "Concurrency",
        "Throughput (infer/sec)",
        "p99 (ms)",
        "Server queue (ms)",
        "Server compute (ms)",
        "Meets constraints",
    ]
    ordered = sorted(results.points, key=lambda p: (name_of(results, p), p.concurrency))
    rows = [
        [
            _e(name_of(results, p)),
            str(p.concurrency),
            _number(p.throughput, 1),
            _number(p.p99_ms, 2),
            _number(p.queue_ms, 3),
            _number(p.compute_ms, 3),
            _yes_no(results.goal.satisfies(p)),
        ]
        for p in ordered
    ]
    return _table("all-points", header, rows, {0, 6})


def html_page(results: Results) -> str:
    title = f"modelhost tune: {results.model}"
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        _summary(results),
        _chosen_section(results),
    ]
    if results.points:
        parts += ["<h2>Throughput against p99 latency</h2>", throughput_svg(results)]
        top = results.top(BREAKDOWN_COUNT)
        parts += [
            f"<h2>Latency breakdown of the best {len(top)} configuration(s)</h2>",
            breakdown_svg(results, top),
        ]
        parts += [f"<h2>Best configurations (up to {TOP_COUNT})</h2>", _top_table(results)]
    if results.failures:
        parts += ["<h2>Failures</h2>", _failures_table(results)]
    if results.points:
        parts += ["<h2>Every point measured</h2>", _points_table(results)]
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_html(path: Path, results: Results) -> None:
    """Writes the report of a run to `path` (a self-contained HTML page)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html_page(results), encoding="utf-8")
