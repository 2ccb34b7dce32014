"""The steps of an ensemble that name models of other deployments, as the ensemble's replica reaches them: its
engine's `services.external_models` (modelhost.backends.api.ExternalModels).

An ensemble's deployment does not load the models its steps name where the plan deploys them elsewhere
(`ClusterPlan.external_of`): each step's model then runs, scales and is counted in its own deployment, as on
one server it runs in its own model. The ensemble's replicas route to those deployments as the ingress does
(`cluster.routing`: modelhost's link to the least busy replica, Ray's handle until one reports), following the
applications' status every few seconds: a step's model is healthy while its application serves. At load,
the ensemble waits for each such application to serve, then takes the model's configuration from it (as its
server completed it).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from modelhost.cluster.plan import ClusterPlan, DeploymentSpec
from modelhost.cluster.routing import Router
from modelhost.cluster.serve_state import DEPLOY_TIMEOUT_S, ServeState
from modelhost.errors import Unavailable
from modelhost.types import InferenceRequest, InferenceResponse

# How often a load waiting for a step's deployment looks at its status.
_POLL_S = 0.25
# The applications' status is followed at every STATUSES_EVERY-th refresh of the links (every 5 s): each look
# costs Ray Serve's controller CPU, and every replica of every such ensemble looks.
STATUSES_EVERY = 5


class RemoteSteps:
    """ExternalModels over the deployments `specs` (their models), from inside a replica of another."""

    def __init__(self, specs: Sequence[DeploymentSpec], repositories: Sequence[str], token: str) -> None:
        plan = ClusterPlan(tuple(repositories), tuple(specs))
        # Without a token (deployed by others, no MODELHOST_LINK_TOKEN) the replicas open no link: Ray's handle.
        self._router = Router(ServeState(plan, token))
        self._router.attached = True
        self._names = {model for spec in specs for model in spec.models}
        self._specs = list(specs)
        self._refresher: asyncio.Task[None] | None = None

    async def start(self, interval: float) -> None:
        """Follow the deployments (on the engine's loop, which the ensembles' steps run on)."""
        for spec in self._specs:
            self._router.add(spec)
        with contextlib.suppress(Exception):  # Ray busy for a moment: the refresher tries again
            await self._router.refresh_links()
        self._refresher = asyncio.get_running_loop().create_task(
            self._router.refresh_links_forever(interval, STATUSES_EVERY)
        )

    def serves(self, name: str) -> bool:
        return name in self._names

    async def config(self, name: str, versions: set[int]) -> Any:
        await self._wait_serving(name)
        for version in sorted(v for v in versions if v >= 0):
            if not await self._router.model_ready(name, str(version)):
                raise Unavailable(f"version {version} of '{name}' is not ready in its deployment")
        return await self._router.model_config(name)

    async def _wait_serving(self, name: str) -> None:
        """Until the deployment of `name` serves (deployed at the same time as this one, it may still be
        starting); Unavailable, with Ray's reason, if it failed or does not come within DEPLOY_TIMEOUT_S."""
        deadline = time.monotonic() + DEPLOY_TIMEOUT_S
        while True:
            await self._router.refresh_statuses()
            if self._router.serving(name):
                return
            if self._router.state(name) == "DEPLOY_FAILED" or time.monotonic() > deadline:
                raise Unavailable(self._router.failure(name))
            await asyncio.sleep(_POLL_S)

    def healthy(self, name: str, version: str = "") -> bool:
        return self._router.serving(name)

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        return await self._router.infer(request)

    def infer_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        return self._router.infer_stream(request)
