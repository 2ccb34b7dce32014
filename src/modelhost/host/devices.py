"""What compute devices this host has."""

from __future__ import annotations

import functools
import math
import os
import subprocess
from pathlib import Path


@functools.cache
def gpu_count() -> int:
    """NVIDIA GPUs visible to this process: the driver's /proc entries or, where a sandbox does not show them
    (gVisor), the GPUs `nvidia-smi -L` lists; narrowed by CUDA_VISIBLE_DEVICES."""
    present = proc_gpus()
    if present is None:
        present = nvidia_smi_gpus()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        listed = [v for v in visible.split(",") if v.strip() and v.strip() != "-1"]
        present = min(present, len(listed))
    return present


def proc_gpus(directory: Path = Path("/proc/driver/nvidia/gpus")) -> int | None:
    """The GPUs the NVIDIA driver lists in /proc, or None where there is no such folder."""
    try:
        return len(list(directory.iterdir()))
    except OSError:
        return None


def nvidia_smi_gpus() -> int:
    """The GPUs `nvidia-smi -L` lists (0 without nvidia-smi, or when it fails)."""
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return 0
    if done.returncode != 0:
        return 0
    return sum(1 for line in done.stdout.splitlines() if line.startswith("GPU "))


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
