"""The counters both response caches keep for Triton's cache metrics, and the families they render."""

from __future__ import annotations

import time

from modelhost.engine.cache_counters import CacheCounters
from modelhost.observability.stats import CACHE_FAMILIES


def test_lookups_are_hits_and_misses_and_their_time_adds_up() -> None:
    counters = CacheCounters()
    counters.looked_up(time.perf_counter_ns(), hit=True)
    counters.looked_up(time.perf_counter_ns(), hit=False)
    counters.looked_up(time.perf_counter_ns(), hit=False)
    assert (counters.lookups, counters.hits, counters.misses) == (3, 1, 2)
    assert counters.lookup_ns >= 0 and counters.insertion_ns == 0
    counters.inserted(time.perf_counter_ns() - 5_000)
    assert counters.insertion_ns >= 5_000


def test_the_families_are_tritons_in_its_order_with_durations_in_microseconds() -> None:
    counters = CacheCounters()
    counters.lookups, counters.hits, counters.misses = 3, 1, 2
    counters.lookup_ns, counters.insertion_ns = 7_999, 12_000
    lines = counters.render(0.25, 4, 5)
    assert [line.split()[2] for line in lines if line.startswith("# TYPE")] == [n for n, _ in CACHE_FAMILIES]
    values = {line.split()[0]: line.split()[1] for line in lines if not line.startswith("#")}
    assert values == {
        "nv_cache_util": "0.250000",
        "nv_cache_num_entries": "4",
        "nv_cache_num_lookups": "3",
        "nv_cache_num_hits": "1",
        "nv_cache_num_misses": "2",
        "nv_cache_num_evictions": "5",
        "nv_cache_lookup_duration": "7",
        "nv_cache_insertion_duration": "12",
    }
