"""What the server under test uses while a point is measured: CPU and memory, GPU memory and utilisation.

A server the tuner started is a process tree it can see (psutil), so its CPU is its own, not the load
generator's on the same host. A server given with --url is seen through its metrics endpoint: Triton's host-wide
memory gauge, as Model Analyzer reads it (its CPU gauge is the whole host's, so no CPU figure). GPU figures
come from the nv_gpu_* gauges where the server exports them (a GPU and --allow-gpu-metrics), on both.
"""

from __future__ import annotations

import contextlib
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from modelhost.host.process_tree import TreeUsage, tree_usage


@dataclass(frozen=True, slots=True)
class Usage:
    cpu_cores: float | None
    ram_mb: float | None
    gpu_memory_mb: float | None
    gpu_utilization: float | None  # percent, averaged over the GPUs


def parse_gauges(text: str, names: set[str]) -> dict[str, float]:
    """The sums over label sets of the named gauges in a Prometheus text exposition."""
    values: dict[str, float] = {}
    counts: dict[str, int] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name not in names:
            continue
        with contextlib.suppress(ValueError, IndexError):
            value = float(line.rsplit(" ", 1)[1])
            values[name] = values.get(name, 0.0) + value
            counts[name] = counts.get(name, 0) + 1
    if "nv_gpu_utilization" in values:
        values["nv_gpu_utilization"] /= counts["nv_gpu_utilization"]
    return values


GAUGES = {"nv_cpu_memory_used_bytes", "nv_gpu_memory_used_bytes", "nv_gpu_utilization"}


def fetch_gauges(metrics_url: str | None) -> dict[str, float]:
    """The gauges of GAUGES the endpoint exports ({} when it cannot be read)."""
    if not metrics_url:
        return {}
    try:
        with urllib.request.urlopen(metrics_url, timeout=5) as response:
            return parse_gauges(response.read().decode("utf-8", "replace"), GAUGES)
    except (OSError, urllib.error.URLError, ValueError):
        return {}


class UsageMeter:
    """Start before a measurement, `finish()` after it."""

    def __init__(self, metrics_url: str | None, pid: int | None) -> None:
        self.metrics_url = metrics_url
        self.pid = pid
        self._cpu0 = 0.0
        self._t0 = 0.0

    def _usage(self) -> TreeUsage | None:
        return tree_usage(self.pid) if self.pid is not None else None

    def _cpu_seconds(self) -> float:
        usage = self._usage()
        return usage.cpu_seconds if usage is not None else 0.0

    def _rss_mb(self) -> float | None:
        usage = self._usage()
        return usage.rss_bytes / 2**20 if usage is not None else None

    def start(self) -> None:
        self._cpu0 = self._cpu_seconds()
        self._t0 = time.monotonic()

    def finish(self) -> Usage:
        elapsed = time.monotonic() - self._t0
        gauges = fetch_gauges(self.metrics_url)
        if self.pid is not None:
            cpu: float | None = (self._cpu_seconds() - self._cpu0) / elapsed if elapsed > 0 else None
            ram = self._rss_mb()
        else:  # nv_cpu_utilization is the whole host's, load generator included when it runs there: left out
            cpu = None
            used = gauges.get("nv_cpu_memory_used_bytes")
            ram = used / 2**20 if used is not None else None
        gpu_memory = gauges.get("nv_gpu_memory_used_bytes")
        return Usage(
            cpu_cores=cpu,
            ram_mb=ram,
            gpu_memory_mb=gpu_memory / 2**20 if gpu_memory is not None else None,
            gpu_utilization=gauges["nv_gpu_utilization"] * 100 if "nv_gpu_utilization" in gauges else None,
        )
