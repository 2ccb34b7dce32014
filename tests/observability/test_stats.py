"""The latency histogram behind the console's p50 and p99 (the statistics' `latency_histogram`)."""

from __future__ import annotations

import random

from modelhost.observability.stats import LatencyHistogram, ModelStats, RequestTiming, latency_bucket_upper_ns


def _bucket_of(histogram: LatencyHistogram) -> int:
    (index,) = [i for i, n in enumerate(histogram.counts) if n]
    return index


def test_each_latency_falls_in_a_bucket_whose_bounds_hold_it() -> None:
    rng = random.Random(7)
    samples = [0, 1, 3, 4, 5, 7, 8, 1000, 10**6, 10**9] + [rng.randrange(1, 10**11) for _ in range(2000)]
    for ns in samples:
        histogram = LatencyHistogram()
        histogram.add(ns)
        index = _bucket_of(histogram)
        lower = latency_bucket_upper_ns(index - 1) if index else 0
        upper = latency_bucket_upper_ns(index)
        assert lower <= ns < upper
        # A quarter octave: the bound is at most 25% above what it holds (past the first few nanoseconds).
        if ns >= 8:
            assert upper <= ns * 1.25 + 1


def test_latencies_past_the_last_bucket_are_counted_in_it() -> None:
    histogram = LatencyHistogram()
    histogram.add(2**70)
    assert histogram.counts[-1] == 1


def test_the_statistics_json_carries_the_successful_requests_latencies() -> None:
    stats = ModelStats("m", "1")
    for ns in (1_000_000, 1_100_000, 5_000_000):
        stats.succeeded(ns, RequestTiming())
    stats.served_from_cache(2_000, 1_000)
    stats.failed(9_000_000, "OTHER")
    histogram = stats.to_json()["latency_histogram"]
    assert histogram["unit"] == "ns"
    assert sum(count for _, count in histogram["buckets"]) == 4  # the failure is not a success's latency
    bounds = [upper for upper, _ in histogram["buckets"]]
    assert bounds == sorted(bounds)
    assert all(upper > 0 for upper in bounds)
