"""In-place instance updates: which instances a reload adds and which it removes.

As Triton: a reload whose configuration differs from the serving one only in `instance_group` (and
`version_policy`), with the model's files unchanged, keeps the serving version and its instances, adds the
instances the new groups ask for beyond them and removes those they no longer ask for. Requests go on being served
by the kept instances throughout. An instance is known by its signature (kind, device, rate-limiter needs, host
policy, secondary devices, passive), not by its group's name or place: renaming or reordering groups changes
nothing. A removed instance finishes what it runs first; one holding sequences serves them to their end.

The registry applies the change (builder.py `VersionBuilder.regroup`); LoadedModel puts instances into and out
of service.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from modelhost.engine.scheduling.rate_limiter import needs_of

# (kind, device, resources, priority, host policy, secondary devices, passive)
Signature = tuple[int, int, tuple[tuple[tuple[int, str], int], ...], int, str, bytes, bool]
# (instance group, index within the group, device id): one instance a configuration asks for
PlanItem = tuple[Any, int, int]


def signature(group: Any, device: int) -> Signature:
    """What makes two instances interchangeable: everything about them but the name of their group."""
    needs = needs_of(group, device)
    secondary = b"".join(d.SerializeToString(deterministic=True) for d in group.secondary_devices)
    return (
        int(group.kind),
        device if group.kind == group.KIND_GPU else -1,
        tuple(sorted(needs.resources.items())),
        max(1, needs.priority),
        str(group.host_policy),
        secondary,
        bool(group.passive),
    )


def only_instance_groups_differ(old: Any, new: Any) -> bool:
    """The two configurations differ, and only in their instance groups (and version policy)."""
    if old is None or old.instance_group == new.instance_group:
        return False
    left, right = type(old)(), type(new)()
    left.CopyFrom(old)
    right.CopyFrom(new)
    for config in (left, right):
        config.ClearField("instance_group")
        config.ClearField("version_policy")
    return bool(left == right)


@dataclass
class InstanceChange:
    """What a reload changes: the plan items to build, and the serving instances to take out of service."""

    add: list[PlanItem] = field(default_factory=list)
    remove: list[Any] = field(default_factory=list)
    # The serving instances that stay, with their signatures, followed by the added ones once built.
    kept: list[tuple[Signature, Any]] = field(default_factory=list)


def plan_change(
    placed: list[tuple[Signature, Any]], plan: list[PlanItem], sequences: dict[int, int]
) -> InstanceChange:
    """Match the serving instances (`placed`) to the new plan by signature. Of each signature, as many serving
    instances stay as the plan asks for, those with the most live sequences first (`sequences`: id(instance)
    -> count) so that as few sequences as possible wait on a leaving instance; the rest leave."""
    change = InstanceChange()
    wanted: dict[Signature, list[PlanItem]] = {}
    for item in plan:
        wanted.setdefault(signature(item[0], item[2]), []).append(item)
    serving: dict[Signature, list[Any]] = {}
    for sig, instance in placed:
        serving.setdefault(sig, []).append(instance)
    for sig, instances in serving.items():
        ranked = sorted(instances, key=lambda i: -sequences.get(id(i), 0))
        stay = len(wanted.get(sig, []))
        change.kept.extend((sig, i) for i in ranked[:stay])
        change.remove.extend(ranked[stay:])
    for sig, items in wanted.items():
        change.add.extend(items[len(serving.get(sig, [])) :])
    return change


def free_index(group: Any, index: int, taken: set[str]) -> int:
    """The instance index for a new instance of `group`: its plan index unless a live instance has that name."""
    while f"{group.name}_{index}" in taken:
        index += 1
    taken.add(f"{group.name}_{index}")
    return index


__all__ = [
    "InstanceChange",
    "Signature",
    "free_index",
    "only_instance_groups_differ",
    "plan_change",
    "signature",
]
