"""`--allow-cpu-metrics`: Triton's CPU gauges, read from /proc every --metrics-interval-ms.

    nv_cpu_utilization         busy share of all cores since the previous reading, 0..1 (/proc/stat)
    nv_cpu_memory_total_bytes  MemTotal (/proc/meminfo)
    nv_cpu_memory_used_bytes   MemTotal - MemAvailable, as Triton computes "used"

Busy time is user + nice + system + irq + softirq + steal, idle time idle + iowait: Triton's formula.
Linux only; elsewhere (no /proc) the families are left out, with one log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

log = logging.getLogger("modelhost")

CPU_FAMILIES = ["nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes"]


def read_cpu_times(text: str) -> tuple[int, int]:
    """(busy, idle) jiffies of the aggregate `cpu` line of /proc/stat."""
    first = text.split("\n", 1)[0].split()
    if not first or first[0] != "cpu" or len(first) < 9:
        raise ValueError("no aggregate cpu line in /proc/stat")
    user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in first[1:9])
    return user + nice + system + irq + softirq + steal, idle + iowait


def read_memory(text: str) -> tuple[int, int]:
    """(total, used) bytes from /proc/meminfo; used = MemTotal - MemAvailable."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[name] = int(parts[0]) * 1024
    if "MemTotal" not in values or "MemAvailable" not in values:
        raise ValueError("no MemTotal / MemAvailable in /proc/meminfo")
    total, available = values["MemTotal"], values["MemAvailable"]
    return total, max(0, total - available)


class CpuMetrics:
    def __init__(self, proc: Path = Path("/proc")) -> None:
        self._stat = proc / "stat"
        self._meminfo = proc / "meminfo"
        self.utilization = 0.0
        self.memory_total = 0
        self.memory_used = 0
        self._last: tuple[int, int] | None = None
        self.poll()  # raises OSError / ValueError where /proc cannot be read

    def poll(self) -> None:
        busy, idle = read_cpu_times(self._stat.read_text())
        if self._last is not None:
            busy_diff = max(0, busy - self._last[0])
            idle_diff = max(0, idle - self._last[1])
            if busy_diff + idle_diff > 0:
                self.utilization = busy_diff / (busy_diff + idle_diff)
        self._last = (busy, idle)
        self.memory_total, self.memory_used = read_memory(self._meminfo.read_text())

    def render(self) -> list[str]:
        return [
            "# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]",
            "# TYPE nv_cpu_utilization gauge",
            f"nv_cpu_utilization {round(self.utilization, 6)}",
            "# HELP nv_cpu_memory_total_bytes CPU total memory (RAM), in bytes",
            "# TYPE nv_cpu_memory_total_bytes gauge",
            f"nv_cpu_memory_total_bytes {self.memory_total}",
            "# HELP nv_cpu_memory_used_bytes CPU used memory (RAM), in bytes",
            "# TYPE nv_cpu_memory_used_bytes gauge",
            f"nv_cpu_memory_used_bytes {self.memory_used}",
        ]


def start_cpu_metrics() -> CpuMetrics | None:
    try:
        return CpuMetrics()
    except (OSError, ValueError) as e:
        log.info("CPU metrics are not available on this machine: %s", e)
        return None


async def poll_forever(metrics: CpuMetrics, interval_ms: float) -> None:
    """Refresh every `interval_ms` (the reading takes a few microseconds: on the event loop)."""
    while True:
        await asyncio.sleep(interval_ms / 1000)
        with contextlib.suppress(OSError, ValueError):
            metrics.poll()
