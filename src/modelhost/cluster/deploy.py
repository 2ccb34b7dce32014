"""The Ray side of the cluster: connecting, deploying each deployment of the plan as a Ray Serve application,
updating and deleting one, and reading their status. Every call here blocks (Ray Serve's API is synchronous);
the ingress runs them on a worker thread.

Each deployment of the plan is an application of its own (named after it, holding one Ray Serve deployment,
`models`), so that one can be updated (a rolling update: Ray starts new replicas before it stops old ones) or
deleted without touching the others. Ray Serve's own HTTP proxy stays off: modelhost's frontends are the ingress.
"""

from __future__ import annotations

import logging
import secrets
import socket
import time
from typing import Any

from modelhost.cluster.apps import application, settings_of
from modelhost.cluster.plan import ClusterPlan, DeploymentSpec, Locate
from modelhost.cluster.serve_state import (
    DEPLOY_TIMEOUT_S,
    NAMESPACE,
    STATISTICS_ACTOR,
    AppStatus,
    ServeState,
)
from modelhost.cluster.statistics import StatisticsCollector

log = logging.getLogger("modelhost.cluster")

_POLL_S = 0.25
# How long the head of a cluster given by address may take to accept a connection.
CONNECT_TIMEOUT_S = 10.0
# How long a stop waits for its deployments to be deleted (Ray's own blocking delete waits 60 s for one).
DELETE_TIMEOUT_S = 60.0


class ClusterError(RuntimeError):
    """Ray could not be reached, or refused what was asked of it."""


class Cluster(ServeState):
    """The Ray cluster the plan's deployments run on: what the ingress deploys, updates and deletes there."""

    def __init__(self, plan: ClusterPlan) -> None:
        super().__init__(plan, secrets.token_hex(16))  # the ingress's own link token, new at each start
        # Bumped at each update of a deployment: a changed argument makes Ray replace its replicas.
        self._generation: dict[str, int] = {}

    def connect(self, address: str | None, num_cpus: int | None = None) -> None:
        """Join the cluster at `address` ("auto": the one on this machine), or start a local one (None)."""
        import ray

        if address not in (None, "auto", "local") and not address.startswith("ray://"):
            _check_reachable(address)  # Ray itself retries an unreachable head for minutes
        try:
            ray.init(
                address=address,
                namespace=NAMESPACE,
                num_cpus=num_cpus if address is None else None,
                include_dashboard=False,
                log_to_driver=False,
            )
        except (ConnectionError, RuntimeError, ValueError) as e:
            where = f"at {address}" if address else "on this machine"
            raise ClusterError(f"cannot reach the Ray cluster {where}: {e}") from None

    def gcs_address(self) -> str:
        """host:port of the cluster's head (its GCS)."""
        import ray

        return str(ray.get_runtime_context().gcs_address)

    def start(self) -> None:
        """Start Ray Serve (without its HTTP proxy) and the statistics collector."""
        import ray
        from ray import serve

        serve.start(proxy_location="Disabled")
        self.collector = (
            ray.remote(StatisticsCollector)
            .options(name=STATISTICS_ACTOR, namespace=NAMESPACE, get_if_exists=True, num_cpus=0)
            .remote()
        )

    def _application(self, spec: DeploymentSpec, overrides: dict[str, str], locate: Locate | None) -> Any:
        external = self.plan.external_of(spec, locate)
        generation = self._generation.get(spec.name, 0)
        return application(
            spec, settings_of(self.plan, spec, overrides, generation, self.link_token, external)
        )

    def deploy_many(
        self, specs: list[DeploymentSpec], overrides: dict[str, str], locate: Locate | None = None
    ) -> dict[str, str]:
        """Deploy these (all at once, without waiting on each other); the failures, by deployment. `locate`:
        the deployment serving a model now (default: the plan's), where an ensemble's steps are sent."""
        from ray import serve
        from ray.serve.api import RunTarget

        if not specs:
            return {}
        targets = [
            RunTarget(target=self._application(spec, overrides, locate), name=spec.name, route_prefix=None)
            for spec in specs
        ]
        serve.run_many(targets, wait_for_applications_running=False)
        return self.wait([spec.name for spec in specs])

    def deploy(
        self,
        spec: DeploymentSpec,
        overrides: dict[str, str],
        *,
        update: bool = False,
        locate: Locate | None = None,
    ) -> str | None:
        """Deploy one (a rolling update of it if `update`); why it failed, or None."""
        if update:
            self._generation[spec.name] = self._generation.get(spec.name, 0) + 1
        return self.deploy_many([spec], overrides, locate).get(spec.name)

    def wait(self, names: list[str], timeout: float = DEPLOY_TIMEOUT_S) -> dict[str, str]:
        """Wait until each application runs or failed; the failures (and those still starting at the timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            statuses = self.statuses()
            pending = [
                n for n in names if statuses.get(n, AppStatus("NOT_STARTED", "")).status not in _SETTLED
            ]
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(_POLL_S)
        failures: dict[str, str] = {}
        for name in names:
            status = statuses.get(name, AppStatus("NOT_STARTED", "not deployed"))
            if status.status != "RUNNING":
                failures[name] = status.message or f"deployment {status.status.lower()}"
        return failures

    def delete(self, name: str) -> None:
        from ray import serve

        serve.delete(name)
        self._generation.pop(name, None)
        if self.collector is not None:
            self.collector.forget.remote(name)

    def shutdown(self, names: list[str], keep_collector: bool = False) -> None:
        """Delete what this ingress deployed (and the statistics collector, unless others' deployments report
        to it), then leave the cluster (a local one stops with it)."""
        import ray
        from ray import serve

        # Every deletion is asked for first, then all are waited for together: Ray's blocking delete waits for
        # the application's replicas to stop (some 5 s), which one after the other made a stop take minutes.
        asked: list[str] = []
        for name in names:
            try:
                serve.delete(name, _blocking=False)
                asked.append(name)
            except Exception as e:  # leaving anyway
                log.warning("could not delete deployment '%s': %s", name, e)
        deadline = time.monotonic() + DELETE_TIMEOUT_S
        while asked:
            try:
                present = self.statuses()
                asked = [name for name in asked if name in present]
            except Exception as e:  # leaving anyway
                log.warning("could not follow the deletion of %s: %s", ", ".join(asked), e)
                break
            if not asked:
                break
            if time.monotonic() > deadline:
                log.warning("deployment(s) %s not deleted after %.0f s", ", ".join(asked), DELETE_TIMEOUT_S)
                break
            time.sleep(_POLL_S)
        if self.collector is not None and not keep_collector:
            ray.kill(self.collector)
        ray.shutdown()


def _check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"the Ray cluster address '{address}' is not host:port (or 'auto')")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as e:
        raise ClusterError(
            f"cannot reach the Ray cluster at {address}: {e.strerror or e} (is its head running? `ray status`)"
        ) from None


_SETTLED = {"RUNNING", "DEPLOY_FAILED", "UNHEALTHY"}
