"""What the report and the PNG plots both show of a run: names, colours, latency parts, constraints in words."""

from __future__ import annotations

import dataclasses

import pytest

from modelhost.tune.figure_data import (
    COLOURS,
    SEGMENTS,
    breakdown,
    colours,
    constraints_text,
    describe,
    name_of,
    tooltip,
)
from modelhost.tune.goal import Goal
from tune.report_runs import BATCHED, DEFAULT, make_point, make_results


def test_names_and_descriptions_of_measured_and_unknown_variants() -> None:
    results = make_results()
    point = make_point(BATCHED, 8, 500.0, 18.0)
    assert name_of(results, point) == "densenet_config_0"
    assert describe(results, point) == "2 x CPU, max_batch_size 16, dynamic batching (delay 100 us)"
    assert tooltip(results, point) == "densenet_config_0, concurrency 8: 500.0 infer/sec, p99 18.00 ms"
    stray = dataclasses.replace(point, variant="unknown")
    assert name_of(results, stray) == describe(results, stray) == "unknown"


def test_colours_follow_the_order_of_measurement() -> None:
    palette = colours(make_results())
    assert list(palette) == [DEFAULT.key, BATCHED.key]  # the one that failed has no point, no colour
    assert list(palette.values()) == COLOURS[:2]
    assert colours(make_results(measured=[])) == {}


def test_breakdown_adds_up_to_the_average_latency() -> None:
    parts = breakdown(make_point(BATCHED, 8, 500.0, 20.0))
    assert [name for name, _ in parts] == list(SEGMENTS)
    assert sum(value for _, value in parts) == pytest.approx(12.0)  # avg 0.6 x p99
    assert dict(parts)["other"] == pytest.approx(12.0 - 2.0 - 1.0 - 6.0 - 1.0)


def test_constraints_in_words() -> None:
    assert constraints_text(make_results(Goal())) == "none"
    both = make_results(Goal(latency_budget_ms=20.0, min_throughput=150.0))
    assert constraints_text(both) == "p99 latency at most 20 ms, throughput at least 150 infer/sec"
