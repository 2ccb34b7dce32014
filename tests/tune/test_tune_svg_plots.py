"""The report's plot of throughput against p99 latency, from a hand-made run (report_runs.py)."""

from __future__ import annotations

from pathlib import Path

from tune.report_runs import MEASURED, PARETO, make_results, render


def test_scatter_plot(tmp_path: Path) -> None:
    _text, page = render(tmp_path, make_results())
    dots = page.find("circle", **{"class": "point"})
    assert len(dots) == len(MEASURED)
    assert len({d["fill"] for d in dots}) == 2  # one colour per configuration
    by_tooltip = {d["tooltip"]: d for d in dots}
    chosen = "densenet_config_0, concurrency 8: 500.0 infer/sec, p99 18.00 ms"
    over = "densenet_config_default, concurrency 4: 200.0 infer/sec, p99 25.00 ms"
    assert chosen in by_tooltip and over in by_tooltip
    assert by_tooltip[chosen]["fill"] != by_tooltip[over]["fill"]

    # The front's vertices are the dots of the Pareto points, in order.
    (front,) = page.find("polyline", **{"class": "pareto-front"})
    vertices = [tuple(pair.split(",")) for pair in front["points"].split()]
    expected = []
    for p99, throughput in PARETO:
        (dot,) = [
            d for t, d in by_tooltip.items() if t.endswith(f"{throughput:.1f} infer/sec, p99 {p99:.2f} ms")
        ]
        expected.append((dot["cx"], dot["cy"]))
    assert vertices == expected
    assert "Pareto front" in page.inside["text"]

    (budget,) = page.find("line", **{"class": "latency-budget"})
    assert budget["x1"] == budget["x2"] and "stroke-dasharray" in budget
    assert "latency budget 20 ms" in page.inside["text"]
    # The budget sits between the dots at p99 18 ms and 25 ms.
    assert float(by_tooltip[chosen]["cx"]) < float(budget["x1"]) < float(by_tooltip[over]["cx"])

    # Everything inside the plot area, the highest throughput near its top, and higher p99 further right.
    (area,) = page.find("rect", **{"class": "plot-area"})
    left, top = float(area["x"]), float(area["y"])
    right, bottom = left + float(area["width"]), top + float(area["height"])
    for dot in dots:
        assert left < float(dot["cx"]) < right and top < float(dot["cy"]) < bottom, dot
    assert left < float(budget["x1"]) < right
    highest = by_tooltip["densenet_config_0, concurrency 16: 520.0 infer/sec, p99 40.00 ms"]
    assert float(highest["cy"]) < top + (bottom - top) * 0.2
    assert float(highest["cx"]) > left + (right - left) * 0.6
