"""The HTML report and the PNG plots of `modelhost tune`, from a hand-made run: two configurations measured at
several concurrencies (some points over the latency budget) and one that failed to load."""

from __future__ import annotations

import importlib
import re
from html.parser import HTMLParser
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from modelhost.tune import plots
from modelhost.tune.checkpoint import RunState, VariantRecord
from modelhost.tune.goal import Goal
from modelhost.tune.point import Point
from modelhost.tune.report import write_html
from modelhost.tune.results import Results
from modelhost.tune.space import KIND_CPU, Variant

DEFAULT = Variant(1, KIND_CPU, 8, False)
BATCHED = Variant(2, KIND_CPU, 16, True, 100)
BROKEN = Variant(4, KIND_CPU, 32, True, 500, (16, 32))
FAILURE = "failed to load: <out of memory> & more"
VOID = {"meta", "br", "link", "img", "input", "hr"}

# (variant, concurrency, throughput, p99 ms)
MEASURED = [
    (DEFAULT, 1, 100.0, 5.0),
    (DEFAULT, 2, 180.0, 9.0),
    (DEFAULT, 4, 200.0, 25.0),  # over the budget
    (BATCHED, 1, 110.0, 4.0),
    (BATCHED, 2, 220.0, 7.0),
    (BATCHED, 4, 400.0, 12.0),
    (BATCHED, 8, 500.0, 18.0),  # the best within the budget
    (BATCHED, 16, 520.0, 40.0),  # over the budget
]
PARETO = [(4.0, 110.0), (7.0, 220.0), (12.0, 400.0), (18.0, 500.0), (40.0, 520.0)]


def make_point(variant: Variant, concurrency: int, throughput: float, p99: float) -> Point:
    return Point(
        variant=variant.key,
        concurrency=concurrency,
        throughput=throughput,
        p50_ms=p99 / 2,
        p90_ms=p99 * 0.8,
        p95_ms=p99 * 0.9,
        p99_ms=p99,
        avg_ms=p99 * 0.6,
        queue_ms=p99 * 0.1,
        compute_input_ms=p99 * 0.05,
        compute_infer_ms=p99 * 0.3,
        compute_output_ms=p99 * 0.05,
        send_recv_ms=0.1,
        response_wait_ms=p99 * 0.5,
        cpu_cores=1.5,
        ram_mb=300.0,
        gpu_memory_mb=None,
        gpu_utilization=None,
        stable=True,
        seconds=3.0,
        run=1,
    )


def make_results(
    goal: Goal | None = None, measured: list[tuple[Variant, int, float, float]] | None = None, **kwargs: Any
) -> Results:
    state = RunState("densenet", {})
    state.record(DEFAULT, default=True)
    batched = state.record(BATCHED)
    batched.errors[64] = "deadline exceeded"
    state.variants[BROKEN.key] = VariantRecord("densenet_config_1", BROKEN, failure=FAILURE)
    for variant, concurrency, throughput, p99 in MEASURED if measured is None else measured:
        state.points[(variant.key, concurrency)] = make_point(variant, concurrency, throughput, p99)
    return Results(
        model="densenet",
        state=state,
        goal=goal or Goal(latency_budget_ms=20.0),
        search="quick",
        thread_parameter=None,
        default_key=DEFAULT.key,
        wall_s=93.4,
        stopped_by_time=True,
        **kwargs,
    )


class Page(HTMLParser):
    """The tags of a page (with their attributes, and an SVG element's <title> as attribute "tooltip"), its
    text, and the text inside each tag; fails on an end tag that closes anything but the innermost open element."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.stack: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.inside: dict[str, list[str]] = {}
        self.feed(text)
        self.close()
        assert self.stack == [], f"unclosed elements: {self.stack}"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))
        if tag not in VOID:
            self.stack.append(self.tags[-1])

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1][0] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self.stack:
            self.inside.setdefault(self.stack[-1][0], []).append(data)
        if len(self.stack) >= 2 and self.stack[-1][0] == "title":  # an SVG tooltip: kept on its element
            self.stack[-2][1]["tooltip"] = data

    def find(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())]

    def ids(self) -> list[str]:
        return [a["id"] for _, a in self.tags if "id" in a]

    def words(self) -> str:
        return " ".join(" ".join(self.text).split())


def render(tmp_path: Path, results: Results) -> tuple[str, Page]:
    path = tmp_path / "out" / "report.html"
    write_html(path, results)
    text = path.read_text(encoding="utf-8")
    return text, Page(text)


def table_rows(text: str, table_id: str) -> list[list[str]]:
    match = re.search(rf'<table id="{table_id}">(.*?)</table>', text, re.S)
    assert match is not None, table_id
    body = match.group(1).split("<tbody>")[1]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", body)]


def test_report_has_the_plots_and_tables_in_order(tmp_path: Path) -> None:
    text, page = render(tmp_path, make_results())
    assert page.tags[0][0] == "html"
    assert page.find("h1") and "densenet" in page.inside["h1"][0]
    ids = page.ids()
    order = ["summary", "chosen", "throughput-vs-p99", "latency-breakdown", "top-configurations"]
    order += ["failures", "all-points"]
    assert [i for i in ids if i in order] == order
    words = page.words()
    assert "Search: quick; wall time 93 s (stopped by the time limit)" in words
    assert "Measured 8 point(s) of 2 configuration(s); 1 configuration(s) failed." in words
    assert "Constraints: p99 latency at most 20 ms. Objective: the highest throughput." in words

    # Self-contained: no script, nothing loaded from elsewhere.
    assert "<script" not in text.lower()
    for _, attrs in page.tags:
        for name in ("src", "href"):
            assert not attrs.get(name, "").startswith(("http://", "https://", "//")), attrs


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


def test_chosen_point_is_marked_and_described(tmp_path: Path) -> None:
    text, page = render(tmp_path, make_results())
    (ring,) = page.find("circle", **{"class": "chosen"})
    (chosen_dot,) = [
        d
        for d in page.find("circle", **{"class": "point"})
        if d["tooltip"] == "densenet_config_0, concurrency 8: 500.0 infer/sec, p99 18.00 ms"
    ]
    assert (ring["cx"], ring["cy"]) == (chosen_dot["cx"], chosen_dot["cy"])
    assert float(ring["r"]) > float(chosen_dot["r"])
    (label,) = page.find("text", **{"class": "chosen-label"})
    assert abs(float(label["x"]) - float(ring["cx"])) < 20 and abs(float(label["y"]) - float(ring["cy"])) < 20
    assert "chosen" in page.inside["text"]

    words = page.words()
    assert "<h2>Chosen configuration</h2>" in text
    assert (
        "<strong>densenet_config_0</strong>: 2 x CPU, max_batch_size 16, dynamic batching (delay 100 us)"
        in text
    )
    assert "Throughput: 500.0 infer/sec p99 latency: 18.00 ms Concurrency: 8" in words
    # The starting configuration's best point within the budget is 180 infer/sec.
    assert "2.78x the throughput of the starting configuration (densenet_config_default" in words
    assert "No configuration met" not in words


def test_breakdown_and_tables(tmp_path: Path) -> None:
    text, page = render(tmp_path, make_results())
    segments = page.find("rect", **{"class": "segment"})
    assert len(segments) == 5 * 2  # top(5) is the best point of each of the two configurations
    labels = page.inside["text"]
    assert "densenet_config_0 (concurrency 8)" in labels
    assert "densenet_config_default (concurrency 2)" in labels
    for name in ("server queue", "compute input", "compute infer", "compute output", "other"):
        assert name in labels
    # The segments of a bar add up to the average latency (0.6 x p99 = 10.8 ms for the chosen point).
    assert "10.80 ms" in labels

    top = table_rows(text, "top-configurations")
    assert [row[1] for row in top] == ["densenet_config_0", "densenet_config_default"]
    assert top[0][0] == "1" and top[0][3] == "8" and top[0][4] == "500.0" and top[0][-1] == "yes"
    assert top[0][11] == ""  # no GPU memory
    assert "Cost per 1M" not in text

    failures = table_rows(text, "failures")
    assert [row[0] for row in failures] == ["densenet_config_0", "densenet_config_1"]
    assert failures[0][3] == "concurrency 64: deadline exceeded"
    assert "failed to load: <out of memory> & more" in page.words()
    assert "&lt;out of memory&gt; &amp; more" in text  # escaped, not a tag

    points = table_rows(text, "all-points")
    assert len(points) == len(MEASURED)
    assert sum(row[-1] == "no" for row in points) == 2


def test_cost_column_when_priced(tmp_path: Path) -> None:
    results = make_results(Goal(latency_budget_ms=20.0, price_per_hour=0.34), price_label="c6i.2xlarge (EC2)")
    text, page = render(tmp_path, results)
    assert "Cost per 1M inferences (USD, c6i.2xlarge (EC2))" in page.words()
    top = table_rows(text, "top-configurations")
    assert top[0][12] == f"{0.34 / (500.0 * 3600) * 1e6:.4f}"


def test_no_configuration_meets_the_constraints(tmp_path: Path) -> None:
    text, page = render(tmp_path, make_results(Goal(latency_budget_ms=1.0)))
    words = page.words()
    assert "Closest configuration" in words
    assert "No configuration met the constraints (p99 latency at most 1 ms); this is the closest." in words
    # The closest: the lowest p99.
    assert "Throughput: 110.0 infer/sec p99 latency: 4.00 ms Concurrency: 1" in words
    assert all(row[-1] == "no" for row in table_rows(text, "all-points"))


def test_a_run_that_measured_nothing_still_renders(tmp_path: Path) -> None:
    _text, page = render(tmp_path, make_results(measured=[]))
    assert "No configuration could be measured." in page.words()
    assert page.find("svg") == []
    ids = page.ids()
    assert "failures" in ids and "top-configurations" not in ids and "all-points" not in ids
    assert "Measured 0 point(s) of 0 configuration(s)" in page.words()


def test_write_pngs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    directory = tmp_path / "plots"
    notes = plots.write_pngs(directory, make_results())
    expected = [directory / "throughput_vs_p99.png", directory / "latency_breakdown.png"]
    assert notes == [f"Wrote {path}" for path in expected]
    for path in expected:
        assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_write_pngs_of_an_empty_run(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    notes = plots.write_pngs(tmp_path, make_results(measured=[]))
    assert len(notes) == 2
    assert (tmp_path / "latency_breakdown.png").read_bytes().startswith(b"\x89PNG")


def test_write_pngs_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def import_module(name: str, package: str | None = None) -> ModuleType:
        if name.split(".")[0] == "matplotlib":
            raise ImportError(f"No module named {name!r}")
        return real(name, package)

    monkeypatch.setattr("modelhost.tune.plots.importlib.import_module", import_module)
    directory = tmp_path / "plots"
    notes = plots.write_pngs(directory, make_results())
    assert len(notes) == 1
    assert "not written" in notes[0] and "pip install 'modelhost[plot]'" in notes[0]
    assert not directory.exists()
