"""instance_update.py: which instances a reload that changes only the instance groups keeps, adds and removes."""

from __future__ import annotations

from typing import Any

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.engine.registry.instance_update import (
    free_index,
    only_instance_groups_differ,
    plan_change,
    signature,
)


def config(text: str) -> Any:
    return text_format.Parse(f'name: "m" backend: "python" {text}', ModelConfig())


def plan(cfg: Any) -> list[tuple[Any, int, int]]:
    return [(g, i, 0) for g in cfg.instance_group for i in range(max(1, g.count))]


def placed(cfg: Any) -> list[tuple[Any, str]]:
    return [(signature(g, d), f"{g.name}_{i}") for g, i, d in plan(cfg)]


def test_names_and_order_of_groups_do_not_matter() -> None:
    old = config(
        'instance_group [ { name: "a" count: 1 kind: KIND_CPU }, { name: "b" count: 2 kind: KIND_CPU } ]'
    )
    new = config('instance_group [ { name: "c" count: 3 kind: KIND_CPU } ]')
    change = plan_change(placed(old), plan(new), {})
    assert change.add == [] and change.remove == []
    assert sorted(i for _, i in change.kept) == ["a_0", "b_0", "b_1"]


def test_fewer_instances_leave_those_holding_no_sequence_first() -> None:
    old = config('instance_group [ { name: "a" count: 3 kind: KIND_CPU } ]')
    new = config('instance_group [ { name: "a" count: 1 kind: KIND_CPU } ]')
    instances = placed(old)
    holding = {id(instances[1][1]): 2}
    change = plan_change(instances, plan(new), holding)
    assert [i for _, i in change.kept] == ["a_1"]
    assert change.remove == ["a_0", "a_2"]


def test_other_rate_limiter_needs_are_another_instance() -> None:
    old = config(
        'instance_group [ { count: 1 kind: KIND_CPU rate_limiter { resources [ { name: "R" count: 2 } ] } } ]'
    )
    new = config(
        'instance_group [ { count: 1 kind: KIND_CPU rate_limiter { resources [ { name: "R" count: 3 } ] } } ]'
    )
    change = plan_change(placed(old), plan(new), {})
    assert len(change.add) == 1 and len(change.remove) == 1 and change.kept == []


def test_only_instance_groups_differ() -> None:
    base = config("instance_group [ { count: 1 kind: KIND_CPU } ]")
    more = config("instance_group [ { count: 2 kind: KIND_CPU } ]")
    assert only_instance_groups_differ(base, more)
    assert not only_instance_groups_differ(base, base)
    other = config("max_batch_size: 4 instance_group [ { count: 2 kind: KIND_CPU } ]")
    assert not only_instance_groups_differ(base, other)
    policy = config("version_policy { all { } } instance_group [ { count: 2 kind: KIND_CPU } ]")
    assert only_instance_groups_differ(base, policy)


def test_a_new_instance_never_takes_a_live_instance_name() -> None:
    group = config('instance_group [ { name: "g" count: 1 kind: KIND_CPU } ]').instance_group[0]
    taken = {"g_0", "g_1"}
    assert free_index(group, 0, taken) == 2
    assert free_index(group, 0, taken) == 3
