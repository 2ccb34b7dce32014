"""What Ray Serve says of the plan's deployments, read by whoever routes to them (the ingress, and an ensemble's
replica reaching its steps in other deployments): the applications' status, a handle on one, and the replicas'
reports (statistics, link addresses, the models they hold) held by the collector. Every call here blocks (Ray's
API is synchronous); callers run them on a worker thread."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from modelhost.cluster.plan import ClusterPlan
from modelhost.cluster.statistics import Report

NAMESPACE = "modelhost"
STATISTICS_ACTOR = "modelhost-statistics"
# How long a deployment may take to start its replicas (their models load in them) before it counts as failed.
DEPLOY_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class AppStatus:
    status: str  # Ray Serve's ApplicationStatus: RUNNING, DEPLOYING, DEPLOY_FAILED, UNHEALTHY, DELETING, ...
    message: str
    replicas: int = 0  # running now


class ServeState:
    """The plan's deployments as Ray Serve runs them (read only)."""

    def __init__(self, plan: ClusterPlan, link_token: str) -> None:
        self.plan = plan
        # The collector of the replicas' reports (cluster.statistics); found by name where not started here.
        self.collector: Any = None
        # The secret the replicas' links ask for ("": none, and no link is opened: Ray's handles serve).
        self.link_token = link_token

    def statuses(self) -> dict[str, AppStatus]:
        from ray import serve

        return {
            name: AppStatus(str(getattr(app.status, "value", app.status)), app.message or "", _running(app))
            for name, app in serve.status().applications.items()
        }

    def handle(self, name: str) -> Any:
        from ray import serve

        return serve.get_app_handle(name)

    def reports(self) -> list[Report]:
        """Every replica's last statistics and metrics (cluster.statistics)."""
        import ray

        if not self._find_collector():
            return []
        reports: list[Report] = ray.get(self.collector.reports.remote())
        return reports

    def links(self) -> list[Report]:
        """The live replicas' link addresses and held models (their reports without statistics: cheap)."""
        import ray

        if not self._find_collector():
            return []
        links: list[Report] = ray.get(self.collector.links.remote())
        return links

    def _find_collector(self) -> bool:
        if self.collector is None:
            import ray

            with contextlib.suppress(ValueError):  # not started (yet): an ingress attaching later makes it
                self.collector = ray.get_actor(STATISTICS_ACTOR, namespace=NAMESPACE)
        return self.collector is not None


def _running(app: Any) -> int:
    """The running replicas of an application's deployments (Ray Serve's status, by replica state)."""
    running = 0
    for deployment in app.deployments.values():
        for state, count in deployment.replica_states.items():
            if str(getattr(state, "value", state)) == "RUNNING":
                running += int(count)
    return running
