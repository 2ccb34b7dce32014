"""A hand-made tuning run for the tests of the report and the plots: two configurations measured at several
concurrencies (some points over the latency budget) and one that failed to load; and a reader of the HTML page."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

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
