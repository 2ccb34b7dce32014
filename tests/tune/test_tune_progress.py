"""The tuner's progress display: a live line with the best so far and the ETA on a terminal, plain lines elsewhere."""

from __future__ import annotations

import time

import numpy as np
import pytest

from modelhost.perf.client import ServerStats
from modelhost.perf.measure import Window
from modelhost.tune.checkpoint import RunState
from modelhost.tune.goal import Goal
from modelhost.tune.point import Point
from modelhost.tune.progress import Progress
from modelhost.tune.space import KIND_CPU, Variant


def point(key: str, concurrency: int, throughput: float, p99: float, seconds: float = 2.0) -> Point:
    return Point(
        key,
        concurrency,
        throughput,
        1,
        1,
        1,
        p99,
        1,
        0,
        0,
        0,
        0,
        0,
        0,
        None,
        None,
        None,
        None,
        True,
        seconds,
        1,
    )


def window() -> Window:
    starts = np.arange(100, dtype=np.int64)
    return Window(0, 1_000_000_000, starts, starts + 1_000_000, 0, 0, ServerStats())


def test_live_line_shows_the_best_so_far_and_the_eta(capsys: pytest.CaptureFixture[str]) -> None:
    state = RunState("mlp", {})
    record = state.record(Variant(1, KIND_CPU, 64, True), default=True)
    now = time.monotonic()
    progress = Progress(Goal(latency_budget_ms=10), now, now + 600, True, None)
    progress.expected_variants = 5
    progress.measured(record, point(record.variant.key, 8, 1234.0, 5.0), cached=False)
    progress.starting(record, 16)
    progress.window(16, 2, window(), 1e6)
    err = capsys.readouterr().err
    assert "\r\033[K" in err
    assert "best mlp_config_default: 1234 infer/sec, p99 5.00 ms" in err
    assert "measuring mlp_config_default c=16" in err
    assert "window 2: 100 infer/sec" in err
    # 5 variants of (so far) 1 point each, 4 points left at 2 s each: the ETA counts them down rather than
    # showing the whole time limit
    assert "ETA 0:08]" in err
    progress.measured(record, point(record.variant.key, 16, 9999.0, 50.0), cached=False)
    assert progress.best is not None and progress.best.throughput == 1234.0  # over the budget: not the best
    out = capsys.readouterr().out
    assert "(outside the constraints)" in out


def test_plain_lines_when_not_on_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    state = RunState("mlp", {})
    record = state.record(Variant(1, KIND_CPU, 64, False), default=True)
    failed = state.record(Variant(2, KIND_CPU, 64, False))
    failed.failure = "the server could not load it: out of memory"
    now = time.monotonic()
    progress = Progress(Goal(), now, now + 60, False, None)
    progress.starting(record, 1)
    progress.window(1, 1, window(), 1e6)
    progress.measured(record, point(record.variant.key, 1, 10.0, 1.0), cached=True)
    progress.failed(failed, None)
    captured = capsys.readouterr()
    assert captured.err == ""
    lines = captured.out.splitlines()
    assert len(lines) == 2
    assert lines[0].endswith("concurrency 1: 10.0 infer/sec, p99 1.00 ms from the checkpoint")
    assert lines[1].endswith("mlp_config_0 (2 x CPU, max_batch_size 64, no dynamic batching) failed: "
                             "the server could not load it: out of memory")  # fmt: skip
