"""What either response cache (the local one, response_cache.py; redis, redis_cache.py) counts for Triton's cache
metrics (`nv_cache_*`), and how those families are rendered for /metrics."""

from __future__ import annotations

import time

from modelhost.observability.stats import CACHE_FAMILIES


class CacheCounters:
    """This server's lookups (hits and misses) and the time spent looking up and inserting, server-wide as
    Triton counts them. Durations are kept in nanoseconds and rendered in microseconds."""

    __slots__ = ("hits", "insertion_ns", "lookup_ns", "lookups", "misses")

    def __init__(self) -> None:
        self.lookups = 0
        self.hits = 0
        self.misses = 0
        self.lookup_ns = 0
        self.insertion_ns = 0

    def looked_up(self, started_ns: int, hit: bool) -> None:
        """A lookup begun at `started_ns` (perf_counter_ns) ended: a hit, or a miss."""
        self.lookups += 1
        if hit:
            self.hits += 1
        else:
            self.misses += 1
        self.lookup_ns += time.perf_counter_ns() - started_ns

    def inserted(self, started_ns: int) -> None:
        """An insertion (or the part of it timed from `started_ns`) ended."""
        self.insertion_ns += time.perf_counter_ns() - started_ns

    def render(self, utilization: float, entries: int, evictions: int) -> list[str]:
        """Triton's cache metric families (gauges, server-wide), in Triton's order: these counts with the cache's
        own figures (how full it is, its entries, its evictions)."""
        values = {
            "nv_cache_util": f"{utilization:.6f}",
            "nv_cache_num_entries": entries,
            "nv_cache_num_lookups": self.lookups,
            "nv_cache_num_hits": self.hits,
            "nv_cache_num_misses": self.misses,
            "nv_cache_num_evictions": evictions,
            "nv_cache_lookup_duration": self.lookup_ns // 1000,
            "nv_cache_insertion_duration": self.insertion_ns // 1000,
        }
        lines: list[str] = []
        for name, help_text in CACHE_FAMILIES:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {values[name]}"]
        return lines
