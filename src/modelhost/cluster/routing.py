"""Routing to the plan's Ray Serve deployments: which deployment serves a model, whether it runs, and which of its
replicas takes a request.

Inference takes modelhost's link to the least busy replica (in a multiplexed pool, one that reported the model
loaded), and Ray Serve's handle where there is none yet (Ray picks the replica; a multiplexed pool's requests
carry the model as Ray's multiplexed model id, so Ray loads it where it routes them); other calls about a model
take Ray's handle. The ingress's `ClusterEngine` routes this way, and so does an ensemble's replica sending its
steps to other deployments (`cluster.steps`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from modelhost.cluster.failure import ray_reason, unwrapped
from modelhost.cluster.plan import DeploymentSpec
from modelhost.cluster.serve_state import ServeState
from modelhost.engine_api import CallContext
from modelhost.errors import InvalidArgument, ModelhostError, NotFound, Unavailable
from modelhost.transport.client import EngineGone, RemoteEngine, connect
from modelhost.types import InferenceRequest, InferenceResponse

log = logging.getLogger("modelhost.cluster")

# Application states in which the replicas that run still serve: a rolling update, a replica being replaced.
_STILL_SERVING = frozenset({"DEPLOYING", "UNHEALTHY"})


class Router:
    """The deployments of a plan, and the way to each model's replicas."""

    def __init__(self, state: ServeState) -> None:
        self._state = state
        # The deployment serving each model now, and the deployments by name.
        self._routes: dict[str, DeploymentSpec] = {}
        self._deployments: dict[str, DeploymentSpec] = {}
        # Why a deployment failed to start, or does not run now (its models are then UNAVAILABLE with this).
        self._failures: dict[str, str] = {}
        self._states: dict[str, str] = {}  # Ray Serve's status of each application, where followed
        self._handles: dict[str, Any] = {}
        # modelhost's link to each replica of a deployment (its engine over TCP), by deployment and replica: the
        # inference path. Ray's handle serves until a replica's first report gives its address, and a
        # multiplexed pool's models that no replica holds.
        self._links: dict[str, dict[str, RemoteEngine]] = {}
        # The models each replica held at its last report (what a multiplexed pool's requests are routed by).
        self._held: dict[str, dict[str, frozenset[str]]] = {}
        # Links to replicas that withdrew theirs (stopping): closed once their requests are answered.
        self._draining: list[RemoteEngine] = []
        # Serving deployments made by someone else (or by the ingress, seen from a replica): their status is
        # followed at each refresh.
        self.attached = False

    def serving(self, name: str) -> bool:
        """Whether a deployment serves `name` and runs (as last seen)."""
        spec = self._routes.get(name)
        return spec is not None and spec.name not in self._failures

    def failure(self, name: str) -> str:
        """Why the deployment of `name` does not serve ("" if it does or is unknown)."""
        spec = self._routes.get(name)
        return self._failures.get(spec.name, "") if spec is not None else ""

    def state(self, name: str) -> str:
        """Ray Serve's last status of the application of `name` ("NOT_DEPLOYED" when it has none)."""
        spec = self._routes.get(name)
        return self._states.get(spec.name, "NOT_DEPLOYED") if spec is not None else "NOT_DEPLOYED"

    async def refresh_statuses(self) -> None:
        """Follow the applications' status: a deployment serves while its application runs, or updates or
        replaces a replica with others running."""
        statuses = await asyncio.to_thread(self._state.statuses)
        for name in self._deployments:
            status = statuses.get(name)
            self._states[name] = status.status if status is not None else "NOT_DEPLOYED"
            if status is not None and (
                status.status == "RUNNING" or (status.status in _STILL_SERVING and status.replicas > 0)
            ):
                if self._failures.pop(name, None) is not None:
                    self._handles.pop(name, None)  # deployed again: a fresh handle, for its new replicas
            else:
                state = status.status.lower() if status is not None else "not deployed"
                reason = status.message if status is not None and status.message else ""
                self._failures[name] = f"application '{name}' is {state}" + (f": {reason}" if reason else "")

    def add(self, spec: DeploymentSpec) -> None:
        """Route its models to this deployment."""
        self._deployments[spec.name] = spec
        for model in spec.models:
            self._routes[model] = spec
        self._handles.pop(spec.name, None)

    def remove(self, spec: DeploymentSpec) -> None:
        """Stop routing to this deployment (its links drain)."""
        self._draining.extend(self._links.pop(spec.name, {}).values())
        self._deployments.pop(spec.name, None)
        self._failures.pop(spec.name, None)
        self._handles.pop(spec.name, None)
        for model in spec.models:
            if self._routes.get(model) is spec:
                del self._routes[model]

    @property
    def deployment_names(self) -> list[str]:
        return list(self._deployments)

    def _route(self, name: str) -> DeploymentSpec:
        spec = self._routes.get(name)
        if spec is None:
            raise NotFound(f"Request for unknown model: '{name}' is not found")
        failure = self._failures.get(spec.name)
        if failure is not None:
            raise Unavailable(f"Request for unknown model: '{name}' is not at ready state ({failure})")
        return spec

    def _handle(self, spec: DeploymentSpec, model: str, *, stream: bool = False) -> Any:
        handle = self._handles.get(spec.name)
        if handle is None:
            handle = self._handles[spec.name] = self._state.handle(spec.name)
        if spec.multiplexed:
            handle = handle.options(multiplexed_model_id=model, stream=stream)
        elif stream:
            handle = handle.options(stream=True)
        return handle

    def _link(self, spec: DeploymentSpec, model: str) -> RemoteEngine | None:
        """The least busy link of the deployment's replicas that hold `model`, if any."""
        links = self._links.get(spec.name)
        if not links:
            return None
        held = self._held.get(spec.name, {})
        best: RemoteEngine | None = None
        for replica, link in links.items():
            if spec.multiplexed and model not in held.get(replica, ()):
                continue
            if link.connected and (best is None or link.in_flight < best.in_flight):
                best = link
        return best

    async def refresh_links(self, statuses: bool = True) -> None:
        """Open links to the replicas that reported an address, close those to replicas gone (attached, and
        `statuses`: follow the applications' statuses too)."""
        if self.attached and statuses:
            await self.refresh_statuses()
        if not self._state.link_token:
            return  # the replicas open no link without one: Ray's handles serve
        reports = await asyncio.to_thread(self._state.links)
        wanted: dict[str, dict[str, str]] = {}
        held: dict[str, dict[str, frozenset[str]]] = {}
        for report in reports:
            spec = self._deployments.get(report.deployment)
            if report.link and spec is not None:
                wanted.setdefault(report.deployment, {})[report.replica] = report.link
                held.setdefault(report.deployment, {})[report.replica] = frozenset(report.models)
        self._held = held
        for deployment, links in list(self._links.items()):
            for replica, link in list(links.items()):
                if replica not in wanted.get(deployment, {}) or not link.connected:
                    del links[replica]  # no new requests; those in flight finish (the replica waits for them)
                    self._draining.append(link)
        for link in list(self._draining):
            if not link.connected or link.in_flight == 0:
                self._draining.remove(link)
                link.close()
        for deployment, addresses in wanted.items():
            links = self._links.setdefault(deployment, {})
            for replica, address in addresses.items():
                if replica in links:
                    continue
                try:
                    links[replica] = await connect(
                        address, lambda: None, lambda changes: None, self._state.link_token
                    )
                except OSError as e:  # a replica stopping: the next report says so
                    log.debug("no link to replica %s of '%s' at %s: %s", replica, deployment, address, e)

    async def refresh_links_forever(self, interval: float, statuses_every: int = 1) -> None:
        """Refresh the links every `interval` seconds, and the statuses at every `statuses_every`-th time (Ray
        Serve's status costs its controller a few milliseconds of CPU each time)."""
        rounds = 0
        while True:
            try:
                await self.refresh_links(statuses=rounds % statuses_every == 0)
            except Exception as e:  # Ray unreachable for a moment: the cluster watch decides
                log.debug("refreshing the replicas' links failed: %s", e)
            rounds += 1
            await asyncio.sleep(interval)

    async def _call(self, model: str, method: str, *args: Any) -> Any:
        spec = self._route(model)
        try:
            answer = await self._handle(spec, model).call.remote(method, model, *args)
        except ModelhostError:
            raise
        except Exception as e:  # Ray's errors: the replica died, the deployment is gone
            raise Unavailable(f"the deployment serving '{model}' did not answer: {ray_reason(e)}") from None
        return unwrapped(answer)

    async def model_ready(self, name: str, version: str = "") -> bool:
        try:
            spec = self._route(name)
        except ModelhostError:
            return False
        if spec.multiplexed and not version:
            return True  # loaded on demand by whichever replica its requests reach
        try:
            return bool(await self._call(name, "model_ready", name, version))
        except ModelhostError:
            return False

    async def model_config(self, name: str, version: str = "") -> Any:
        from tritonclient.grpc.model_config_pb2 import ModelConfig

        return ModelConfig.FromString(await self._call(name, "model_config", name, version))

    # -- inference ---------------------------------------------------------------------------------------------

    async def infer(self, request: InferenceRequest, context: CallContext | None = None) -> InferenceResponse:
        spec = self._route(request.model_name)
        link = self._link(spec, request.model_name)
        if link is not None:
            try:
                return await link.infer(portable(request))
            except EngineGone:
                raise Unavailable(
                    f"the deployment serving '{request.model_name}' did not answer: its replica went away"
                ) from None
            except NotFound:
                if not spec.multiplexed:
                    raise
                # Evicted since the replica's last report: Ray's multiplexing loads it again below.
        try:
            answer = await self._handle(spec, request.model_name).infer.remote(portable(request))
        except Exception as e:
            raise Unavailable(
                f"the deployment serving '{request.model_name}' did not answer: {ray_reason(e)}"
            ) from None
        response: InferenceResponse = unwrapped(answer)
        return response

    async def infer_stream(
        self, request: InferenceRequest, context: CallContext | None = None
    ) -> AsyncIterator[InferenceResponse]:
        spec = self._route(request.model_name)
        link = None if spec.multiplexed else self._link(spec, request.model_name)
        if link is not None:
            try:
                async for response in link.infer_stream(portable(request)):
                    yield response
            except EngineGone:
                raise Unavailable(
                    f"the deployment serving '{request.model_name}' did not answer: its replica went away"
                ) from None
            return
        stream = self._handle(spec, request.model_name, stream=True).infer_stream.remote(portable(request))
        try:
            async for item in stream:
                yield unwrapped(item)
        except ModelhostError:
            raise
        except Exception as e:
            raise Unavailable(
                f"the deployment serving '{request.model_name}' did not answer: {ray_reason(e)}"
            ) from None
        finally:
            stream.cancel()  # the client went away, or the stream ended: nothing more is wanted


def portable(request: InferenceRequest) -> InferenceRequest:
    """The request as it crosses Ray: no trace, and no shared-memory windows (none can be registered here)."""
    if request.shared_memory:
        raise InvalidArgument("shared memory is not available on a Ray cluster")
    if request.trace is not None:
        request.trace = None
    return request
