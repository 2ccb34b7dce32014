"""The stability rule and the latency metric."""

from __future__ import annotations

import numpy as np
import pytest

from modelhost.perf.measure import is_stable, latency_ns


def test_stability_rule() -> None:
    assert not is_stable([100, 100], [1, 1], 10)
    assert is_stable([100, 105, 109], [1.0, 1.05, 1.09], 10)
    assert not is_stable([100, 105, 111], [1, 1, 1], 10)  # throughput 11% apart
    assert not is_stable([100, 100, 100], [1.0, 1.0, 1.2], 10)  # latency 20% apart
    assert is_stable([50, 300, 100, 100, 100], [9, 9, 1, 1, 1], 10)  # only the last three count
    assert not is_stable([0, 0, 0], [1, 1, 1], 10)
    assert is_stable([100, 104, 100], [1, 1, 1], 5) and not is_stable([100, 106, 100], [1, 1, 1], 5)


def test_latency_metric() -> None:
    latencies = np.arange(1, 101, dtype=np.int64)
    assert latency_ns(latencies, -1) == 50.5
    assert latency_ns(latencies, 95) == pytest.approx(95.05)
    assert latency_ns(np.zeros(0, np.int64), 95) == 0.0
