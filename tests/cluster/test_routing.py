"""How the ingress picks a replica's link: the least busy, and for a multiplexed pool only among the replicas
that hold the model (else none: Ray's handle routes, and Ray's multiplexing loads it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from modelhost.cluster.engine import ClusterEngine
from modelhost.cluster.plan import plan_from


@dataclass
class FakeLink:
    in_flight: int
    connected: bool = True


@dataclass
class FakeCluster:
    plan: Any


def _engine(document: dict[str, Any]) -> tuple[ClusterEngine, Any]:
    plan = plan_from(["/m"], document, ["a", "b", "c"])
    engine = ClusterEngine(cast(Any, FakeCluster(plan)))
    for spec in plan.deployments:
        engine.add(spec)
    return engine, plan


def test_the_least_busy_connected_link_of_the_deployment() -> None:
    engine, plan = _engine({"deployments": {"g": {"models": ["a", "b", "c"]}}})
    (spec,) = plan.deployments
    busy, idle, gone = FakeLink(5), FakeLink(1), FakeLink(0, connected=False)
    engine._links = {"g": cast(Any, {"r1": busy, "r2": idle, "r3": gone})}
    assert engine._link(spec, "a") is idle
    engine._links = {}
    assert engine._link(spec, "a") is None  # no replica reported yet: Ray's handle


def test_a_multiplexed_pool_routes_to_a_replica_holding_the_model() -> None:
    engine, plan = _engine({"deployments": {"pool": {"models": ["*"], "max_models_per_replica": 2}}})
    (spec,) = plan.deployments
    r1, r2 = FakeLink(3), FakeLink(0)
    engine._links = {"pool": cast(Any, {"r1": r1, "r2": r2})}
    engine._held = {"pool": {"r1": frozenset({"a"}), "r2": frozenset({"b"})}}
    assert engine._link(spec, "a") is r1  # busier, but it has the model
    assert engine._link(spec, "b") is r2
    assert engine._link(spec, "c") is None  # nobody holds it: Ray's multiplexing loads it somewhere
