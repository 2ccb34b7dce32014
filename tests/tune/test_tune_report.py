"""The HTML report of `modelhost tune`, from a hand-made run (report_runs.py)."""

from __future__ import annotations

from pathlib import Path

from modelhost.tune.goal import Goal
from tune.report_runs import MEASURED, make_results, render, table_rows


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
