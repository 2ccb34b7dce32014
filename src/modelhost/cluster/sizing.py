"""Replica memory sized from the models themselves: `actor: {memory: measured}` (the default).

Before deploying, the ingress loads each model of such a deployment once, in a modelhost server of its own (the
same repositories and server options, no frontends), reads what the model took (modelhost measures every load:
the resident memory its load added to the process tree, python stubs included; `memory_usage` in its
statistics), and unloads it. A deployment's replicas then reserve, in Ray's `memory` resource, what its models
take together (a multiplexed pool: its K largest), with a margin. A model that cannot be loaded here is left
unmeasured (its deployment reserves nothing for it, and fails or not on the cluster as it will).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from modelhost.cluster.plan import MEASURED, ClusterPlan, DeploymentSpec

log = logging.getLogger("modelhost.cluster")

# The reservation: measured bytes times this, plus a floor for what a replica's engine takes besides its models.
MARGIN = 1.25
REPLICA_FLOOR = 64 << 20


def measure(plan: ClusterPlan) -> dict[str, int]:
    """Each model's measured host memory in bytes, for the deployments that ask for it."""
    wanted = [m for spec in plan.deployments if spec.actor.get("memory") == MEASURED for m in spec.models]
    if not wanted:
        return {}
    from modelhost.in_process import Server

    sizes: dict[str, int] = {}
    options = {"model_control_mode": "explicit", "load_models": [], **plan.server_options}
    with Server(list(plan.repositories), **options) as server:
        for name in wanted:
            try:
                server.load(name)
                sizes[name] = _host_bytes(server.model(name).statistics())
            except Exception as e:  # a model that does not load here: unmeasured
                log.warning(
                    "could not measure model '%s' (its replicas reserve no memory for it): %s", name, e
                )
                continue
            finally:
                try:
                    server.unload(name, unload_dependents=True)
                except Exception as e:  # already gone
                    log.debug("unloading '%s' after measuring it: %s", name, e)
            log.info("model '%s' takes %d MiB", name, sizes[name] >> 20)
    return sizes


def _host_bytes(rows: list[dict[str, Any]]) -> int:
    return sum(
        int(usage.get("byte_size", 0))
        for row in rows
        for usage in row.get("memory_usage", [])
        if usage.get("type") == "CPU"
    )


def sized(plan: ClusterPlan, sizes: dict[str, int]) -> ClusterPlan:
    """The plan with each measured deployment's actor memory set from its models' sizes."""
    return dataclasses.replace(plan, deployments=tuple(_sized(spec, sizes) for spec in plan.deployments))


def reservation(spec: DeploymentSpec, sizes: dict[str, int]) -> int:
    """What one replica of `spec` reserves: its models together (a multiplexed pool: its K largest)."""
    measured = sorted((sizes.get(m, 0) for m in spec.models), reverse=True)
    held = measured[: spec.max_models_per_replica] if spec.multiplexed else measured
    return int(sum(held) * MARGIN) + REPLICA_FLOOR


def _sized(spec: DeploymentSpec, sizes: dict[str, int]) -> DeploymentSpec:
    if spec.actor.get("memory") != MEASURED:
        return spec
    actor = dict(spec.actor)
    if any(m in sizes for m in spec.models):
        actor["memory"] = reservation(spec, sizes)
    else:
        actor.pop("memory")
    return dataclasses.replace(spec, actor=actor)
