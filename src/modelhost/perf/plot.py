"""Latency vs throughput plots: a self-contained HTML page (inline SVG, no dependency) and a PNG (matplotlib,
the optional `plot` extra)."""

from __future__ import annotations

import html
import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from modelhost.perf.measure import StepResult
from modelhost.perf.options import PerfOptions

COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
WIDTH, HEIGHT, MARGIN = 760, 440, 64


def _series(
    results: Sequence[StepResult], options: PerfOptions
) -> list[tuple[str, list[tuple[float, float]]]]:
    ordered = sorted(results, key=lambda r: r.value)
    series = [("avg", [(r.throughput, r.latency_avg_us / 1e3) for r in ordered])]
    for p in options.percentiles:
        series.append((f"p{p}", [(r.throughput, r.percentiles_us[p] / 1e3) for r in ordered]))
    return series


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    magnitude = 10 ** len(str(int(value))) / 10
    for factor in (1, 2, 2.5, 5, 10):
        if value <= factor * magnitude:
            return float(factor * magnitude)
    return float(10 * magnitude)


def svg(results: Sequence[StepResult], options: PerfOptions, title: str) -> str:
    series = _series(results, options)
    xs = [x for _, points in series for x, _ in points]
    ys = [y for _, points in series for _, y in points]
    x_max, y_max = _nice_max(max(xs, default=1)), _nice_max(max(ys, default=1))
    plot_w, plot_h = WIDTH - 2 * MARGIN, HEIGHT - 2 * MARGIN

    def px(x: float) -> float:
        return MARGIN + x / x_max * plot_w

    def py(y: float) -> float:
        return HEIGHT - MARGIN - y / y_max * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" '
        'font-size="12">',
        f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="15">{html.escape(title)}</text>',
        f'<rect x="{MARGIN}" y="{MARGIN}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#888"/>',
    ]
    for i in range(6):
        gx, gy = x_max * i / 5, y_max * i / 5
        parts.append(
            f'<line x1="{px(gx):.1f}" y1="{MARGIN}" x2="{px(gx):.1f}" y2="{HEIGHT - MARGIN}" stroke="#eee"/>'
        )
        parts.append(
            f'<line x1="{MARGIN}" y1="{py(gy):.1f}" x2="{WIDTH - MARGIN}" y2="{py(gy):.1f}" stroke="#eee"/>'
        )
        parts.append(f'<text x="{px(gx):.1f}" y="{HEIGHT - MARGIN + 16}" text-anchor="middle">{gx:g}</text>')
        parts.append(f'<text x="{MARGIN - 6}" y="{py(gy) + 4:.1f}" text-anchor="end">{gy:g}</text>')
    parts.append(
        f'<text x="{WIDTH / 2}" y="{HEIGHT - 18}" text-anchor="middle">throughput (infer/sec)</text>'
        f'<text x="16" y="{HEIGHT / 2}" text-anchor="middle" transform="rotate(-90 16 {HEIGHT / 2})">'
        "latency (ms)</text>"
    )
    for i, (name, points) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>' for x, y in points]
        ly = MARGIN + 14 + 16 * i
        parts.append(f'<rect x="{MARGIN + 10}" y="{ly - 9}" width="12" height="3" fill="{colour}"/>')
        parts.append(f'<text x="{MARGIN + 28}" y="{ly - 4}">{name}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def html_page(results: Sequence[StepResult], options: PerfOptions, title: str) -> str:
    head = "Concurrency" if options.is_concurrency else "Request rate"
    cols = [
        "infer/sec",
        "avg ms",
        *(f"p{p} ms" for p in options.percentiles),
        "server queue us",
        "compute us",
    ]
    rows = "\n".join(
        "<tr>"
        + "".join(
            f"<td>{c}</td>"
            for c in [
                r.value_text,
                f"{r.throughput:.1f}",
                f"{r.latency_avg_us / 1e3:.3f}",
                *(f"{r.percentiles_us[p] / 1e3:.3f}" for p in options.percentiles),
                f"{r.server_avg_us('queue'):.0f}",
                f"{r.server_compute_us:.0f}",
            ]
        )
        + "</tr>"
        for r in sorted(results, key=lambda r: r.value)
    )
    header = "".join(f"<th>{html.escape(c)}</th>" for c in [head, *cols])
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>'
        + html.escape(title)
        + "</title><style>body{font-family:sans-serif}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}</style></head><body>\n"
        + svg(results, options, title)
        + f"\n<table><tr>{header}</tr>\n{rows}\n</table>\n</body></html>\n"
    )


def write_plots(prefix: str, results: Sequence[StepResult], options: PerfOptions, title: str) -> list[str]:
    """Writes PREFIX.html, and PREFIX.png when matplotlib is installed; returns notes for the user."""
    notes: list[str] = []
    Path(prefix + ".html").write_text(html_page(results, options, title))
    notes.append(f"Plot written to {prefix}.html")
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        plt: Any = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        notes.append(f"{prefix}.png not written: matplotlib is not installed (pip install 'modelhost[plot]')")
        return notes
    figure, axes = plt.subplots(figsize=(8, 5))
    for name, points in _series(results, options):
        axes.plot([x for x, _ in points], [y for _, y in points], marker="o", label=name)
    axes.set_xlabel("throughput (infer/sec)")
    axes.set_ylabel("latency (ms)")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(prefix + ".png", dpi=100)
    plt.close(figure)
    notes.append(f"Plot written to {prefix}.png")
    return notes
