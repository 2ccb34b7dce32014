"""What compute devices this host has."""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path


@functools.cache
def gpu_count() -> int:
    """NVIDIA GPUs visible to this process (the driver's /proc entries, narrowed by CUDA_VISIBLE_DEVICES)."""
    gpus_dir = Path("/proc/driver/nvidia/gpus")
    try:
        present = len(list(gpus_dir.iterdir()))
    except OSError:
        present = 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        listed = [v for v in visible.split(",") if v.strip() and v.strip() != "-1"]
        present = min(present, len(listed))
    return present


def cpu_count() -> int:
    """Cores this process may use: the affinity mask, capped by a CPU quota of its cgroup (a container's CPU
    limit, which leaves the affinity mask at the node's every core), rounded up."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return cores if quota is None else max(1, min(cores, math.ceil(quota)))


def cgroup_cpu_quota(
    root: Path = Path("/sys/fs/cgroup"), membership: Path = Path("/proc/self/cgroup")
) -> float | None:
    """The CPUs' worth of time this process's cgroup may use (Kubernetes' `limits.cpu`), or None without a limit:
    cgroup v2's `cpu.max` ("QUOTA PERIOD" or "max PERIOD"), else v1's `cpu.cfs_quota_us` / `cpu.cfs_period_us`
    (-1 for none), in the process's own cgroup or, with a cgroup namespace, at the root."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        lines = []
    v2 = [line.split(":", 2)[2] for line in lines if line.startswith("0::")]
    v1 = [line.split(":", 2)[2] for line in lines if "cpu" in line.split(":", 2)[1].split(",")]
    for base in dict.fromkeys([*(root / p.lstrip("/") for p in v2), root]):
        text = _read(base / "cpu.max")
        if text is not None:
            quota, _, period = text.partition(" ")
            return None if quota == "max" else int(quota) / int(period or 100000)
    for base in dict.fromkeys([*(root / "cpu" / p.lstrip("/") for p in v1), root / "cpu"]):
        quota_text, period_text = _read(base / "cpu.cfs_quota_us"), _read(base / "cpu.cfs_period_us")
        if quota_text is not None and period_text is not None:
            return None if int(quota_text) < 0 else int(quota_text) / int(period_text)
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None
