"""The HTML report of a tuning run: one self-contained page (inline SVG plots and CSS, no script, nothing
fetched) with the chosen configuration, throughput against p99 latency with the Pareto front, the latency
breakdown of the best configurations, and tables of the best configurations, the failures and every point."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path

from modelhost.tune.figure_data import BREAKDOWN_COUNT, constraints_text, describe, name_of
from modelhost.tune.point import Point
from modelhost.tune.results import Results
from modelhost.tune.svg_plots import breakdown_svg, throughput_svg

TOP_COUNT = 10  # the rows of the table of the best configurations
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


def _number(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


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
    return '<p id="summary">' + " ".join(escape(s) for s in sentences) + "</p>"


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
            + escape(
                f"No configuration met the constraints ({constraints_text(results)}); this is the closest."
            )
            + "</p>"
        )
    parts.append(
        f"<p><strong>{escape(name_of(results, chosen))}</strong>: {escape(describe(results, chosen))}</p>"
    )
    parts.append(
        "<ul>" + "".join(f"<li>{escape(item)}</li>" for item in _chosen_items(results, chosen)) + "</ul>"
    )
    parts.append("</section>")
    return "".join(parts)


# The tables.


def _table(
    element_id: str, header: Sequence[str], rows: Sequence[Sequence[str]], text_columns: set[int]
) -> str:
    """A table of already escaped cells; the columns in `text_columns` align left."""

    def cell(tag: str, index: int, content: str) -> str:
        css = ' class="text"' if index in text_columns else ""
        return f"<{tag}{css}>{content}</{tag}>"

    head = "<tr>" + "".join(cell("th", i, escape(h)) for i, h in enumerate(header)) + "</tr>"
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
        rows.append([escape(c) for c in row])
    return _table("top-configurations", header, rows, {1, 2, len(header) - 1})


def _failures_table(results: Results) -> str:
    rows = []
    for record in results.failures:
        errors = "<br>".join(
            escape(f"concurrency {concurrency}: {error}")
            for concurrency, error in sorted(record.errors.items())
        )
        described = record.variant.describe(results.thread_parameter)
        rows.append([escape(record.name), escape(described), escape(record.failure), errors])
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
            escape(name_of(results, p)),
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
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
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
