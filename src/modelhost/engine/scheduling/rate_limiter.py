"""Triton's rate limiter (`--rate-limit=execution_count`): one server-wide arbiter of named resources.

An instance group may ask, in its `rate_limiter`, for resources (`name`, `count`, `global`) and a `priority`.
With the limiter on, an instance starts an execution only once the resources it asks for are available, on its
own device (or server-wide for a global resource); it holds them until the execution ends. How many copies of
a resource there are: by default the most any loaded instance asks for (per device, or globally), or what
`--rate-limit-resource=<name>:<count>[:<device>]` says.

Scheduling: an instance pool stages an idle instance here when a request waits for one (`stage`); the limiter
grants staged instances their resources (`dispatch`) in the order of their scaled priority, Triton's
`executions so far x priority` (priority 0 counts as 1), then in the order they were staged. A staged instance
that cannot have its resources yet keeps them from the instances behind it in that order that ask for any of
the same resources (no overtaking on a contended resource), but not from instances that need other resources.

Threads: staging, granting and releasing happen on the event loop; models register and unregister from the
threads that load and unload them, so the limits are swapped whole under a lock and the loop is nudged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from modelhost.errors import ModelConfigError
from modelhost.observability.logs import LOGGER_NAME

log = logging.getLogger(f"{LOGGER_NAME}.rate_limiter")

GLOBAL = -1  # the device key of global resources

# (resource name, count, device: None = every device)
ResourceFlag = tuple[str, int, int | None]
# (device key: a device id or GLOBAL, resource name)
ResourceKey = tuple[int, str]

_INT = re.compile(r"[+-]?[0-9]+")


def parse_resource_flag(text: str) -> ResourceFlag:
    """`<name>:<count>[:<device>]`; raises ValueError with tritonserver's format message."""
    message = (
        "--rate-limit-resource option format is '<resource_name>:<count>:<device>' or "
        f"'<resource_name>:<count>'. Got {text}"
    )
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0].strip():
        raise ValueError(message)
    name = parts[0].strip()
    if not all(_INT.fullmatch(p.strip()) for p in parts[1:]):
        raise ValueError(message)
    count = int(parts[1])
    device = int(parts[2]) if len(parts) == 3 else None
    if count < 0:
        raise ValueError(f"--rate-limit-resource count must be 0 or more, got {text!r}")
    if device is not None and device < 0:
        raise ValueError(f"--rate-limit-resource device must be 0 or more, got {text!r}")
    return name, count, device


@dataclass(frozen=True, slots=True)
class InstanceNeeds:
    """What one instance asks of the limiter: resource key -> count, and its priority."""

    resources: dict[ResourceKey, int] = field(default_factory=dict)
    priority: int = 1


def needs_of(group: Any, device: int) -> InstanceNeeds:
    """The needs of an instance of `group` (an instance_group entry) placed on `device`."""
    if not group.HasField("rate_limiter"):
        return InstanceNeeds()
    resources: dict[ResourceKey, int] = {}
    for resource in group.rate_limiter.resources:
        key = (GLOBAL if getattr(resource, "global") else device, resource.name)
        resources[key] = max(resources.get(key, 0), int(resource.count))
    return InstanceNeeds({k: c for k, c in resources.items() if c > 0}, int(group.rate_limiter.priority))


class Slot:
    """One registered instance: its needs, how many executions it has had, and its staged request, if any."""

    __slots__ = ("executions", "needs", "on_drop", "on_grant", "priority", "removed", "staged_at")

    def __init__(self, needs: InstanceNeeds) -> None:
        self.needs = tuple(needs.resources.items())
        self.priority = max(1, needs.priority)  # as Triton: priority 0 counts as 1
        self.executions = 0
        self.on_grant: Callable[[], None] | None = None
        self.on_drop: Callable[[], None] | None = None  # its staged request will never run (unregistered)
        self.staged_at = 0
        self.removed = False


class RateLimiter:
    def __init__(self, explicit: Iterable[ResourceFlag] = ()) -> None:
        self.explicit = list(explicit)
        self._lock = threading.Lock()  # registrations (from loading threads)
        self._registered: list[Slot] = []
        self._limits: dict[ResourceKey, int] = {}
        self._allocated: dict[ResourceKey, int] = {}
        self._staged: list[Slot] = []
        self._stage_counter = 0
        self._dispatching = False
        self._again = False
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- registration (any thread) ------------------------------------------------------------------------------

    def register(self, needs: list[InstanceNeeds]) -> list[Slot]:
        """Slots for a model version's instances; raises ModelConfigError when the resources cannot serve them
        (a resource both global and per device, or fewer copies than an instance asks for)."""
        slots = [Slot(n) for n in needs]
        with self._lock:
            limits = self._compute([*self._registered, *slots])
            self._registered.extend(slots)
            self._limits = limits
        self._log_limits()
        self._nudge()
        return slots

    def unregister(self, slots: list[Slot]) -> None:
        with self._lock:
            for slot in slots:
                slot.removed = True
            self._registered = [s for s in self._registered if not s.removed]
            # Removing instances cannot make the limits invalid; should it anyway, the old ones stay.
            with contextlib.suppress(ModelConfigError):
                self._limits = self._compute(self._registered)
        self._log_limits()
        self._nudge()

    def _compute(self, slots: list[Slot]) -> dict[ResourceKey, int]:
        wanted: dict[ResourceKey, int] = {}
        for slot in slots:
            for key, count in slot.needs:
                wanted[key] = max(wanted.get(key, 0), count)
        global_names = {name for device, name in wanted if device == GLOBAL}
        for device, name in wanted:
            if device != GLOBAL and name in global_names:
                raise ModelConfigError(
                    f'Resource "{name}" is present as both global and device-specific resource in the model '
                    "configuration."
                )
        limits: dict[ResourceKey, int] = {}
        for key, need in wanted.items():
            given = self._explicit_count(key)
            if given is not None and given < need:
                raise ModelConfigError(
                    f'Resource count for "{key[1]}" is limited to {given} which will prevent scheduling of one '
                    f"or more model instances, the minimum required count is {need}"
                )
            limits[key] = need if given is None else given
        return limits

    def _explicit_count(self, key: ResourceKey) -> int | None:
        """The --rate-limit-resource count for a resource, or None where none is given. A global resource takes
        the largest count given for its name on any device; a per-device one the largest given for its device
        or for every device (as Triton)."""
        device, name = key
        counts = [
            count
            for given_name, count, given_device in self.explicit
            if given_name == name and (device == GLOBAL or given_device is None or given_device == device)
        ]
        return max(counts) if counts else None

    def _log_limits(self) -> None:
        """tritonserver's verbose account of the resources after each change (L0_model_update reads it)."""
        if not log.isEnabledFor(logging.DEBUG):
            return
        lines = ["Max Resource Map===>"]
        by_device: dict[int, list[tuple[str, int]]] = {}
        for (device, name), count in sorted(self._limits.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            by_device.setdefault(device, []).append((name, count))
        for device, resources in by_device.items():
            lines.append(f"\tDevice: {'GLOBAL' if device == GLOBAL else device}")
            lines.extend(f"\t\tResource: {name}\t Count: {count}" for name, count in resources)
        log.debug("%s", "\n".join(lines) + "\n")

    def _nudge(self) -> None:
        """Limits changed on some thread: let the loop grant what they now allow."""
        loop = self._loop
        if loop is not None and self._staged:
            with contextlib.suppress(RuntimeError):  # a closed loop: nothing waits any more
                loop.call_soon_threadsafe(self.dispatch)

    def rows(self) -> list[tuple[str, str, str]]:
        """(resource, device, count) of every resource in use, for the startup log."""
        return [
            (name, "GLOBAL" if device == GLOBAL else str(device), str(count))
            for (device, name), count in sorted(self._limits.items(), key=lambda kv: (kv[0][1], kv[0][0]))
        ]

    # -- scheduling (event loop) ---------------------------------------------------------------------------------

    def stage(
        self, slot: Slot, on_grant: Callable[[], None], on_drop: Callable[[], None] | None = None
    ) -> None:
        """Ask for `slot`'s resources; `on_grant` runs (from `dispatch`) once they are held for it, or `on_drop`
        if the slot is unregistered first (its model unloaded)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        slot.on_grant = on_grant
        slot.on_drop = on_drop
        self._stage_counter += 1
        slot.staged_at = self._stage_counter
        self._staged.append(slot)

    def release(self, slot: Slot, executed: bool = True) -> None:
        """Give back what `slot` holds; `executed` counts an execution for its priority."""
        allocated = self._allocated
        for key, count in slot.needs:
            allocated[key] -= count
        if executed:
            slot.executions += 1

    def held(self, key: ResourceKey) -> int:
        return self._allocated.get(key, 0)

    def available(self, slot: Slot) -> bool:
        limits, allocated = self._limits, self._allocated
        return all(allocated.get(key, 0) + count <= limits.get(key, 0) for key, count in slot.needs)

    def dispatch(self) -> None:
        """Grant staged slots their resources, in priority order; safe to call from a grant callback."""
        if self._dispatching:
            self._again = True
            return
        self._dispatching = True
        try:
            self._again = True
            while self._again:
                self._again = False
                self._grant_round()
        finally:
            self._dispatching = False

    def _grant_round(self) -> None:
        if not self._staged:
            return
        for slot in self._staged:
            if slot.removed and slot.on_drop is not None:
                on_drop, slot.on_drop, slot.on_grant = slot.on_drop, None, None
                on_drop()  # its request fails instead of waiting for ever
        staged = sorted(
            (s for s in self._staged if not s.removed), key=lambda s: (s.executions * s.priority, s.staged_at)
        )
        waiting: list[Slot] = []
        blocked: set[ResourceKey] = set()
        granted: list[Slot] = []
        for slot in staged:
            keys = [key for key, _ in slot.needs]
            if any(key in blocked for key in keys) or not self.available(slot):
                blocked.update(keys)
                waiting.append(slot)
                continue
            for key, count in slot.needs:
                self._allocated[key] = self._allocated.get(key, 0) + count
            granted.append(slot)
        self._staged = waiting
        for slot in granted:
            on_grant, slot.on_grant = slot.on_grant, None
            assert on_grant is not None
            try:
                on_grant()
            except Exception:  # one pool's fault must not strand the others' grants
                log.exception("rate limiter: a granted execution failed to start")
