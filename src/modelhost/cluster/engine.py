"""`ClusterEngine`: the `EngineAPI` of a model repository served by Ray Serve deployments.

modelhost's own HTTP and gRPC frontends run in the ingress (`modelhost ray serve`) over this engine, so clients
see one server: the same endpoints, wording and statuses. Each call about a model goes to the deployment that
serves it, as `cluster.routing` routes (inference over modelhost's link to the least busy replica, other calls
over Ray's handle). Calls about the server combine the deployments' answers;
statistics and metrics are the replicas' summed (`cluster.statistics`). Model control deploys, updates (rolling)
and deletes one deployment without touching the others.

Not on a cluster, refused with a message rather than half-done: client shared memory (the regions are on the
client's machine, the models on others), changing trace and logging settings, and loading a model from files
sent with the request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from typing import Any

from modelhost import TRITON_COMPAT_VERSION
from modelhost.cluster.deploy import Cluster
from modelhost.cluster.plan import DeploymentSpec, Locate
from modelhost.cluster.routing import Router, portable
from modelhost.cluster.statistics import merge, merge_metrics
from modelhost.engine.engine import EXTENSIONS as ENGINE_EXTENSIONS
from modelhost.engine_api import ModelSignature, ShmKind
from modelhost.errors import InvalidArgument, ModelhostError, Unsupported
from modelhost.types import InferenceRequest

log = logging.getLogger("modelhost.cluster")

# The extensions a cluster serves: the engine's, less those refused below (tracing, logging; shared memory is never
# listed, as the engine lists it only when client shared memory is allowed).
EXTENSIONS = [e for e in ENGINE_EXTENSIONS if e not in ("trace", "logging")]


class ClusterEngine(Router):
    """EngineAPI over the plan's Ray Serve deployments."""

    def __init__(
        self, cluster: Cluster, *, server_id: str = "modelhost", strict_readiness: bool = True
    ) -> None:
        super().__init__(cluster)
        self._cluster = cluster
        self._server_id = server_id
        self._strict_readiness = strict_readiness
        # Config overrides of models loaded with one (kept for the replicas Ray starts later).
        self._overrides: dict[str, str] = {}
        self._control = asyncio.Lock()
        self.live = True
        self.accepting = True

    # -- deployments -------------------------------------------------------------------------------------------

    async def deploy_plan(self) -> dict[str, str]:
        """Deploy every deployment of the plan; the failures by deployment (the others serve)."""
        specs = list(self._cluster.plan.deployments)
        failures = await asyncio.to_thread(self._cluster.deploy_many, specs, self._overrides)
        for spec in specs:
            self.add(spec)
        self._failures.update(failures)
        return failures

    async def attach_plan(self) -> None:
        """Serve the plan's deployments as someone else deployed them (a RayService): nothing is deployed, model
        control is refused, and a deployment serves while Ray Serve says its application runs."""
        self.attached = True
        for spec in self._cluster.plan.deployments:
            self.add(spec)
        await self.refresh_statuses()

    # -- health and metadata -----------------------------------------------------------------------------------

    async def is_live(self) -> bool:
        return self.live

    async def is_ready(self) -> bool:
        if not (self.live and self.accepting):
            return False
        if not self._strict_readiness:
            return True
        if self._failures:
            return False
        statuses = await asyncio.to_thread(self._cluster.statuses)
        return all(statuses.get(n) is not None and statuses[n].status == "RUNNING" for n in self._deployments)

    async def server_metadata(self) -> dict[str, Any]:
        return {"name": self._server_id, "version": TRITON_COMPAT_VERSION, "extensions": list(EXTENSIONS)}

    async def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        result: dict[str, Any] = await self._call(name, "model_metadata", name, version)
        return result

    async def model_signature(self, name: str, version: str = "") -> ModelSignature:
        result: ModelSignature = await self._call(name, "model_signature", name, version)
        return result

    # -- inference ---------------------------------------------------------------------------------------------

    async def check_request(self, request: InferenceRequest) -> None:
        await self._call(request.model_name, "check_request", portable(request))

    def sent(self, request: InferenceRequest, send_started_ns: int, *, last: bool = True) -> None:
        return None  # requests are not traced on a cluster (trace_settings refuses)

    def refused(self, name: str, version: str) -> None:
        return None  # the frontend's own refusals are not counted on a cluster's statistics

    # -- statistics, logging and trace settings -----------------------------------------------------------------

    async def statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        if name:
            self._route(name)
        reports = await asyncio.to_thread(self._cluster.reports)
        rows = merge(report.rows for report in reports)
        served = {m for m, spec in self._routes.items() if spec.name not in self._failures}
        rows = [r for r in rows if r.get("name") in served]
        if name:
            rows = [r for r in rows if r.get("name") == name and (not version or r.get("version") == version)]
        return rows

    async def metrics_page(self) -> bytes:
        """The cluster's /metrics page: the replicas' nv_* samples summed (not part of EngineAPI: only the
        ingress's metrics port asks)."""
        reports = await asyncio.to_thread(self._cluster.reports)
        return merge_metrics(report.page for report in reports).encode()

    async def logging_settings(self, changes: dict[str, Any] | None = None) -> dict[str, Any]:
        raise Unsupported("the logging extension is not available on a Ray cluster")

    async def trace_settings(self, model: str = "", changes: dict[str, Any] | None = None) -> dict[str, Any]:
        raise Unsupported("the trace extension is not available on a Ray cluster")

    # -- the model repository ----------------------------------------------------------------------------------

    async def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        rows: dict[str, dict[str, Any]] = {}
        statuses = await asyncio.to_thread(self._cluster.statuses)
        if not ready_only:
            for name in self._cluster.plan.repository_models:
                rows[name] = {"name": name}
        for spec in list(self._deployments.values()):
            failure = self._failures.get(spec.name)
            if failure is not None:
                for model in spec.models:
                    if not ready_only:
                        rows[model] = {"name": model, "state": "UNAVAILABLE", "reason": failure}
                continue
            if spec.multiplexed:
                for model in spec.models:
                    if self._routes.get(model) is spec:
                        rows[model] = {"name": model, "state": "READY", "reason": ""}
                continue
            try:
                index = await self._call(spec.models[0], "repository_index", ready_only)
            except ModelhostError as e:
                for model in spec.models:
                    if not ready_only:
                        rows[model] = {"name": model, "state": "UNAVAILABLE", "reason": str(e)}
                continue
            for row in index:
                if row.get("name") in spec.models and "state" in row:
                    rows[str(row["name"])] = row
        for spec in self._deployments.values():
            status = statuses.get(spec.name)
            for model in spec.models:
                if model in rows and "state" in rows[model] and self._routes.get(model) is spec:
                    # modelhost's addition on a cluster: the replicas of the model's deployment running now
                    rows[model]["replicas"] = status.replicas if status is not None else 0
        return [rows[name] for name in sorted(rows)]

    def _check_control(self) -> None:
        if self.attached:
            raise Unsupported(
                "the deployments are managed by whoever deployed them (a RayService's serveConfigV2, `serve "
                "deploy`): load and unload models there"
            )

    async def load_model(self, name: str, parameters: dict[str, Any], *, files_base64: bool) -> None:
        self._check_control()
        if any(key.startswith("file:") for key in parameters):
            raise Unsupported(
                "loading a model from files sent with the request is not available on a Ray cluster"
            )
        config = parameters.get("config")
        if config is not None and not isinstance(config, str):
            config = json.dumps(config)
        async with self._control:
            spec = self._routes.get(name)
            if spec is None:
                if name not in await asyncio.to_thread(self._repository_models):
                    raise InvalidArgument(
                        f"failed to load '{name}', failed to poll from model repository: "
                        "model not found in any model repository"
                    )
                spec = self._cluster.plan.deployment_of(name) or self._cluster.plan.single(name)
                if spec.multiplexed and spec.name in self._deployments:
                    spec = self._deployments[spec.name]  # the pool runs: it may serve this model again
                elif spec.name in self._deployments:  # a group serving its other models takes this one back
                    current = self._deployments[spec.name]
                    spec = dataclasses.replace(current, models=(*current.models, name))
                elif not spec.multiplexed:
                    spec = dataclasses.replace(spec, models=(name,))
            if spec.multiplexed:
                if config is not None:
                    raise Unsupported(
                        f"model '{name}' is in the multiplexed deployment '{spec.name}', which loads models as "
                        "they are asked for: a config override is not available there"
                    )
                if spec.name in self._deployments:
                    self._routes[name] = spec
                    return
            if config is not None:
                self._overrides[name] = config
            update = spec.name in self._deployments
            failure = await asyncio.to_thread(
                self._cluster.deploy, spec, self._overrides, update=update, locate=self._locator(spec)
            )
            if spec.name in self._deployments:
                self.remove(self._deployments[spec.name])
            self.add(spec)
            if failure is not None:
                self._failures[spec.name] = failure
                raise InvalidArgument(f"failed to load '{name}': {failure}")

    async def unload_model(self, name: str, parameters: dict[str, Any]) -> None:
        self._check_control()
        async with self._control:
            spec = self._routes.get(name)
            if spec is None:
                return  # as a single server: unloading what is not loaded succeeds
            self._overrides.pop(name, None)
            rest = tuple(m for m in spec.models if m != name)
            if spec.multiplexed:
                del self._routes[name]  # its replicas drop it as their least recently used
                return
            if not rest:
                self.remove(spec)
                await asyncio.to_thread(self._cluster.delete, spec.name)
                return
            smaller = dataclasses.replace(spec, models=rest)
            self.remove(spec)
            self.add(smaller)
            failure = await asyncio.to_thread(
                self._cluster.deploy, smaller, self._overrides, update=True, locate=self._locator(smaller)
            )
            if failure is not None:
                self._failures[smaller.name] = failure

    def _locator(self, deploying: DeploymentSpec) -> Locate:
        """Where each model is served once `deploying` is (where its ensembles' steps go)."""

        def locate(model: str) -> DeploymentSpec | None:
            return deploying if model in deploying.models else self._routes.get(model)

        return locate

    def _repository_models(self) -> list[str]:
        from modelhost.cluster.plan import repository_models

        return repository_models(list(self._cluster.plan.repositories))

    async def reload_if_evicted(self, name: str) -> None:
        return None  # a cluster's replicas load their models themselves

    async def register_models(self, alias: str, url: str, names: dict[str, str]) -> None:
        raise Unsupported("registering models from other directories is not available on a Ray cluster")

    async def forget_models(self, alias: str) -> None:
        raise Unsupported("registering models from other directories is not available on a Ray cluster")

    async def model_aliases(self, alias: str = "") -> dict[str, dict[str, Any]]:
        return {}

    async def settled(self, timeout: float | None = None) -> bool:
        return True  # model control here returns once Ray has (or has not) deployed

    # -- shared memory -----------------------------------------------------------------------------------------

    async def check_shared_memory(self, kind: ShmKind) -> None:
        raise Unsupported(
            "shared memory is not available on a Ray cluster: the models run on other machines than the client"
        )

    async def shared_memory_status(self, kind: ShmKind, name: str = "") -> list[dict[str, Any]]:
        return []

    async def register_system_shared_memory(self, name: str, key: str, offset: int, byte_size: int) -> None:
        await self.check_shared_memory("system")

    async def register_cuda_shared_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        await self.check_shared_memory("cuda")

    async def unregister_shared_memory(self, kind: ShmKind, name: str = "") -> None:
        return None
