"""Host policies (`--host-policy=<name>,<setting>=<value>`): where a model instance runs on this host.

As in Triton, an instance group names its policy with `host_policy`, or gets its kind's (`cpu`, `model`,
`gpu_<device>`); a policy with no flag setting it changes nothing. Its settings:

- `cpu-cores=<list>`: the CPU cores the instance runs on (`0-3,8-11`; a single core `5` too);
- `numa-node=<n>`: the NUMA node whose memory the instance allocates from (a bound memory policy), and, unless
  `cpu-cores` is set, the node's cores.

They hold for the threads that load and run the instance, so for what those start: ONNX Runtime's and other
frameworks' thread pools, made while the instance loads, and a python model's stub process. The thread that
loads is put back as it was afterwards. Cores and nodes that this host (this process's CPU set) does not have are
refused when the flag is read, naming them.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import platform
import re
import threading
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SETTINGS = ("cpu-cores", "numa-node")
_NODES = Path("/sys/devices/system/node")
# set_mempolicy(2), which Python does not wrap; its number by architecture, and its modes.
_SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237}
_MPOL_DEFAULT, _MPOL_BIND = 0, 2
log = logging.getLogger("modelhost.host_policy")
_RANGE = re.compile(r"\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?")


class HostPolicyError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Placement:
    """What a policy does to the threads of an instance: the cores they may run on, the node they allocate on."""

    cores: frozenset[int] | None
    numa_node: int | None


def parse_cores(text: str) -> frozenset[int]:
    cores: set[int] = set()
    for part in text.split(","):
        m = _RANGE.fullmatch(part)
        if m is None:
            raise HostPolicyError(f"'cpu-cores' takes core numbers and ranges such as 0-3,8, got '{text}'")
        low, high = int(m.group(1)), int(m.group(2) or m.group(1))
        if high < low:
            raise HostPolicyError(f"'cpu-cores' range {part.strip()} is empty")
        cores.update(range(low, high + 1))
    return frozenset(cores)


def numa_nodes() -> dict[int, frozenset[int]]:
    """This host's NUMA nodes and their cores ({0: every core} where the kernel shows none)."""
    nodes: dict[int, frozenset[int]] = {}
    for entry in sorted(_NODES.glob("node[0-9]*")) if _NODES.is_dir() else ():
        try:
            listed = (entry / "cpulist").read_text().strip()
        except OSError:
            continue
        nodes[int(entry.name[4:])] = parse_cores(listed) if listed else frozenset()
    return nodes or {0: frozenset(os.sched_getaffinity(0))}


def _spans(cores: frozenset[int]) -> str:
    """Cores as the kernel lists them: 0-3,8."""
    ordered = sorted(cores)
    if not ordered:
        return "none"
    spans: list[str] = []
    start = previous = ordered[0]
    for core in ordered[1:]:
        if core != previous + 1:
            spans.append(str(start) if start == previous else f"{start}-{previous}")
            start = core
        previous = core
    spans.append(str(start) if start == previous else f"{start}-{previous}")
    return ",".join(spans)


def placements(policies: Mapping[str, Mapping[str, str]]) -> dict[str, Placement]:
    """Each policy checked against this host; HostPolicyError names the policy and what is wrong."""
    if not policies:
        return {}
    usable = frozenset(os.sched_getaffinity(0))
    nodes = numa_nodes()
    result: dict[str, Placement] = {}
    for name, settings in policies.items():
        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            raise HostPolicyError(
                f"host policy '{name}': unknown setting '{unknown[0]}' (settings: {', '.join(SETTINGS)})"
            )
        node: int | None = None
        cores: frozenset[int] | None = None
        if "numa-node" in settings:
            raw = settings["numa-node"].strip()
            if not raw.isdigit():
                raise HostPolicyError(f"host policy '{name}': 'numa-node' takes a node number, got '{raw}'")
            node = int(raw)
            if node not in nodes:
                raise HostPolicyError(
                    f"host policy '{name}': NUMA node {node} does not exist on this host (nodes: "
                    f"{', '.join(map(str, sorted(nodes)))})"
                )
            cores = nodes[node] & usable
        if "cpu-cores" in settings:
            try:
                cores = parse_cores(settings["cpu-cores"])
            except HostPolicyError as e:
                raise HostPolicyError(f"host policy '{name}': {e}") from None
            missing = cores - usable
            if missing:
                raise HostPolicyError(
                    f"host policy '{name}': CPU core(s) {_spans(frozenset(missing))} are not among this "
                    f"host's cores available to the server ({_spans(usable)})"
                )
        if cores is not None and not cores:
            raise HostPolicyError(f"host policy '{name}': NUMA node {node} has none of the cores available")
        result[name] = Placement(cores, node)
    return result


def policy_name(group: Any, device: int) -> str:
    """The policy an instance group's instance follows: its own, else its kind's, as in Triton."""
    if group.host_policy:
        return str(group.host_policy)
    if group.kind == group.KIND_GPU:
        return f"gpu_{device}"
    return "model" if group.kind == group.KIND_MODEL else "cpu"


def _set_memory_policy(node: int | None) -> None:
    number = _SYS_SET_MEMPOLICY.get(platform.machine())
    if number is None:
        raise HostPolicyError(f"'numa-node' is not supported on {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    if node is None:
        result = libc.syscall(number, _MPOL_DEFAULT, None, ctypes.c_ulong(0))
    else:
        mask = ctypes.c_ulong(1 << node)
        result = libc.syscall(
            number, _MPOL_BIND, ctypes.byref(mask), ctypes.c_ulong(ctypes.sizeof(mask) * 8 + 1)
        )
    if result != 0:
        raise HostPolicyError(f"Unable to set NUMA memory policy: {os.strerror(ctypes.get_errno())}")


def bind_thread(placement: Placement | None) -> None:
    """Put the calling thread (and what it starts from now on) where `placement` says."""
    if placement is None:
        return
    try:
        _bind(placement)
    except (OSError, HostPolicyError) as e:  # a worker thread that cannot be bound still serves, unbound
        log.error("host policy: the instance's thread could not be bound: %s", e)


def _bind(placement: Placement) -> None:
    if placement.cores is not None:
        os.sched_setaffinity(0, placement.cores)  # 0: the calling thread, on Linux
    if placement.numa_node is not None:
        _set_memory_policy(placement.numa_node)


@contextlib.contextmanager
def bound(placement: Placement | None) -> Iterator[None]:
    """The calling thread bound while the block runs, then as it was."""
    if placement is None:
        yield
        return
    before = os.sched_getaffinity(0)
    try:
        _bind(placement)  # failing here fails the instance's load, with the reason
        yield
    finally:
        os.sched_setaffinity(0, before)
        if placement.numa_node is not None:
            _set_memory_policy(None)


# The placement of each instance built under a policy: its worker thread binds itself when it starts.
_instances: weakref.WeakKeyDictionary[Any, Placement] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def remember(instance: Any, placement: Placement | None) -> None:
    if placement is not None:
        with _lock:
            _instances[instance] = placement


def placement_of(instance: Any) -> Placement | None:
    with _lock:
        return _instances.get(instance)
