"""What a process and its children (python stubs, frontend processes) use together: resident memory and CPU time.

Read by `modelhost tune` around each measurement and by the web console's server panel. psutil is imported when
asked for: a server nobody measures does not load it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TreeUsage:
    started: float  # the root process's start, seconds since the epoch
    rss_bytes: int
    cpu_seconds: float  # user and system, summed over the processes alive now


def tree_usage(pid: int) -> TreeUsage | None:
    """The usage of `pid` and its descendants; None when `pid` is gone. A child that ends while it is read is
    left out."""
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
        started = root.create_time()
    except psutil.Error:
        return None
    rss = 0
    cpu = 0.0
    for process in processes:
        try:
            rss += process.memory_info().rss
            times = process.cpu_times()
            cpu += times.user + times.system
        except psutil.Error:
            continue
    return TreeUsage(started, rss, cpu)
