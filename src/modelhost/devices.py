"""What compute devices this host has."""

from __future__ import annotations

import functools
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
    """Cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1
