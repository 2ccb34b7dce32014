"""What loaded model versions take in memory, and the budget they are kept under (--model-memory-budget).

A model version's memory is measured, not estimated: the resident memory of the server's process tree (the
server, and the stub processes of python models) and, for GPU instances, the memory in use on their GPU, read
before and after the version is built. Under a budget, loads run one at a time so that each delta is the load's
own; without one, loads may overlap and the figures of overlapping loads are approximate.

Before a load the figure is not known yet: the last measured size of that model is used, or else the size of
its files on disk (what its weights take at least).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from modelhost.host.gpu_memory import read_gpu_memory
from modelhost.host.memory import release_free_memory

_PAGE = os.sysconf("SC_PAGE_SIZE")
_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "ki": 2**10,
    "kib": 2**10,
    "mi": 2**20,
    "mib": 2**20,
    "gi": 2**30,
    "gib": 2**30,
    "ti": 2**40,
    "tib": 2**40,
}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*|%)\s*")

# Messages of runtimes that ran out of memory while loading (Triton's SageMaker listener answers 507 on these).
OUT_OF_MEMORY_MARKERS = (
    "out of memory",
    "oom",
    "memoryerror",
    "failed to allocate memory",
    "cannot allocate memory",
    "bad_alloc",
)


def total_ram() -> int:
    """Bytes of RAM this server may use: the machine's, or the container's cgroup limit where lower."""
    ram = os.sysconf("SC_PHYS_PAGES") * _PAGE
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            ram = min(ram, int(text))
    return ram


def parse_size(text: str, ram: int | None = None) -> int:
    """Bytes from `text`: a number of bytes, with an optional unit (KB, MB, GB, KiB, MiB, GiB, ...), or a
    percentage of RAM ("75%"). Raises ValueError with a message for anything else."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(
            f"'{text}' is not a size: give bytes with an optional unit (512MiB, 4GB) or a percentage"
        )
    number, unit = float(match.group(1)), match.group(2).lower()
    if unit == "%":
        if not 0 < number <= 100:
            raise ValueError(f"'{text}': a percentage of RAM must be more than 0 and at most 100")
        return int((total_ram() if ram is None else ram) * number / 100)
    if unit not in _UNITS:
        raise ValueError(f"'{text}': unknown unit '{match.group(2)}' (use B, KB, MB, GB, KiB, MiB, GiB, ...)")
    size = int(number * _UNITS[unit])
    if size <= 0:
        raise ValueError(f"'{text}': the size must be more than 0 bytes")
    return size


def is_out_of_memory(message: str) -> bool:
    """Whether a load failure's message says the runtime ran out of memory."""
    lowered = message.lower()
    return any(re.search(rf"\b{re.escape(marker)}\b", lowered) for marker in OUT_OF_MEMORY_MARKERS)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            text = Path(f"/proc/{pid}/task/{task}/children").read_text()
        except OSError:
            continue
        found.extend(int(child) for child in text.split())
    return found


def _rss(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/statm").read_text().split()
    except OSError:  # gone meanwhile
        return 0
    return int(fields[1]) * _PAGE


def process_tree_rss(pid: int | None = None) -> int:
    """Resident bytes of a process and all its descendants (this process by default)."""
    todo = [os.getpid() if pid is None else pid]
    total = 0
    seen: set[int] = set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        total += _rss(current)
        todo.extend(_children(current))
    return total


@dataclass(frozen=True, slots=True)
class MemorySample:
    """The server's memory at one moment: resident bytes of its process tree, and used bytes per GPU."""

    rss: int
    gpus: dict[int, int] = field(default_factory=dict)


def sample(devices: Iterable[int] = ()) -> MemorySample:
    """Memory now, after handing freed heap pages back (so what an unload freed does not count). Blocking."""
    release_free_memory()
    gpus: dict[int, int] = {}
    for device in devices:
        usage = read_gpu_memory(device)
        if usage is not None:
            gpus[device] = usage.used
    return MemorySample(process_tree_rss(), gpus)


@dataclass(slots=True)
class Footprint:
    """What one model version takes: host bytes, and bytes per GPU it has instances on."""

    host: int = 0
    gpus: dict[int, int] = field(default_factory=dict)

    @classmethod
    def between(cls, before: MemorySample, after: MemorySample) -> Footprint:
        return cls(
            max(0, after.rss - before.rss),
            {d: max(0, used - before.gpus.get(d, used)) for d, used in after.gpus.items()},
        )


def files_size(path: Path) -> int:
    """Bytes of the regular files under `path` (a model version's lower bound before it is measured)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


__all__ = [
    "OUT_OF_MEMORY_MARKERS",
    "Footprint",
    "MemorySample",
    "files_size",
    "is_out_of_memory",
    "parse_size",
    "process_tree_rss",
    "sample",
    "total_ram",
]
