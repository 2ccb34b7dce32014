"""One replica of a Ray Serve deployment: modelhost's engine serving the deployment's models, called over Ray.

Each replica runs a `modelhost.Server` without frontends (the same repository handling, backends, dynamic
batching, instance groups, python backend and ensembles as `modelhost serve`), on a loop and thread of its own,
and serves its engine's link (modelhost's transport, over TCP, to whoever presents the ingress's token): the
ingress's inference path. Every second it reports its statistics, metrics page, link address and the models it
holds to the collector (`cluster.statistics`), and at Ray's autoscaling calls its engine's load
(`cluster.autoscaling`). Ray Serve calls the replica's async methods (Ray's handle path: model calls, and
inference where no link is known) on its loop, which hand each call to the engine's loop and await it.

What crosses Ray is `modelhost.types` requests and responses (numpy arrays, pickled by Ray) and, for a failure, a
`Failure` that the ingress turns back into the same `ModelhostError`, so clients get the wording and status a
single server gives.

A multiplexed replica (`multiplexed_replica(k)`) starts with no model and loads the one each request names (Ray
routes requests for a model to a replica that has it, `serve.multiplexed`), keeping at most k, least recently
used out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from modelhost.cluster.failure import Failure
from modelhost.cluster.plan import DeploymentSpec
from modelhost.errors import InternalError
from modelhost.types import InferenceRequest, InferenceResponse

log = logging.getLogger("modelhost.cluster")

T = TypeVar("T")
# How often a replica reports its statistics to the collector (what the cluster's statistics lag by at most).
REPORT_INTERVAL_S = 1.0
# How long a stopping replica keeps serving its link once it has withdrawn it: the ingress looks at the reports
# every REPORT_INTERVAL_S, so that requests it sent meanwhile are answered, not refused by a stopping engine.
LINK_WITHDRAWAL_S = 2.5 * REPORT_INTERVAL_S
# Where the replicas of applications deployed by others (a RayService) find the links' token.
TOKEN_VARIABLE = "MODELHOST_LINK_TOKEN"
# The custom autoscaling metrics each replica reports (cluster.autoscaling reads them): the requests its engine
# holds, and the mean queue time (ms) of those it answered since the last report.
ONGOING_METRIC = "modelhost_ongoing_requests"
QUEUE_METRIC = "modelhost_queue_time_ms"
# The engine calls the ingress may make of a replica besides infer and infer_stream.
CALLS = frozenset(
    {
        "is_ready",
        "model_ready",
        "model_metadata",
        "model_config",
        "model_signature",
        "check_request",
        "statistics",
        "repository_index",
    }
)


@dataclass(frozen=True)
class ReplicaSettings:
    """What every replica of one deployment is started with."""

    deployment: str
    repositories: tuple[str, ...]
    models: tuple[str, ...]
    server_options: dict[str, Any]
    # JSON config overrides of the models loaded with one (the repository API's `config` parameter).
    overrides: dict[str, str]
    statistics_actor: str
    namespace: str
    # Bumped to update the deployment (a changed argument makes Ray replace its replicas, old ones last).
    generation: int = 0
    # What the ingress presents on the replicas' links (their TCP ports are open to the cluster's network).
    link_token: str = ""
    # The other deployments serving models its ensembles' steps name: the steps go there (cluster.steps).
    external: tuple[DeploymentSpec, ...] = ()


class ModelReplica:
    """The class each Ray Serve replica of a (non-multiplexed) deployment instantiates."""

    def __init__(self, settings: ReplicaSettings) -> None:
        from modelhost.in_process import Server
        from modelhost.observability.logs import configure_logging
        from modelhost.options import LogOptions

        # The engine's log, in Triton's format, goes to the replica's stderr (Ray keeps it in the worker's log).
        configure_logging(LogOptions(verbose=int(settings.server_options.get("log_verbose", 0))))
        self._settings = settings
        self._reporter: asyncio.Task[None] | None = None
        self._collector: Any = None
        self.link_address = ""  # where this replica's engine link listens ("": none)
        # The models a multiplexed replica has loaded (its engine's, as Ray's multiplexing loads and evicts).
        self.loaded: set[str] = set()
        # The engine's queue time and count (summed over its models) at the last autoscaling report.
        self._queue_seen = (0, 0)
        self._server = Server(
            list(settings.repositories),
            model_control_mode="explicit",
            load_models=[],
            **settings.server_options,
        ).start()
        try:
            token = settings.link_token or os.environ.get(TOKEN_VARIABLE, "")
            if settings.external:
                self._reach_other_deployments(token)
            for name in self._initial_models():
                self._server.load(name, settings.overrides.get(name))
            # The ingress's inference path: modelhost's own link (the one frontend processes use) over TCP,
            # beside Ray's handle, which costs milliseconds a call.
            # Without a token (deployed by someone else, no variable set) no link: Ray's handle serves alone.
            self.link_address = (
                self._server.call(_open_link(self._server.engine, _node_address(), token)) if token else ""
            )
        except BaseException:
            self._server.stop()
            raise  # Ray retries the replica, then reports the deployment failed with this error
        self._replica_id = _replica_id()

    def _reach_other_deployments(self, token: str) -> None:
        """Send the steps of this deployment's ensembles that name models of other deployments there: the
        engine's ensembles load with those models' configurations and call them (cluster.steps), on its loop."""
        from modelhost.cluster.steps import RemoteSteps

        steps = RemoteSteps(self._settings.external, self._settings.repositories, token)
        self._server.call(steps.start(REPORT_INTERVAL_S))
        engine: Any = self._server.engine  # the Engine itself: this replica runs it in this process
        engine.registry.services.external_models = steps

    def _initial_models(self) -> tuple[str, ...]:
        return self._settings.models

    async def _engine_call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(self._server.submit(coroutine))

    async def _enter(self, model: str) -> None:
        """Make `model` servable here (a multiplexed replica loads it)."""
        self._start_reporting()

    # -- what the ingress calls ---------------------------------------------------------------------------------

    async def infer(self, request: InferenceRequest) -> InferenceResponse | Failure:
        try:
            await self._enter(request.model_name)
            return await self._engine_call(self._server.engine.infer(request))
        except Exception as e:  # every failure goes back to the ingress as data
            return Failure.of(e)

    async def infer_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse | Failure]:
        """The responses of one request, as the engine gives them; closing the stream cancels the request."""
        try:
            await self._enter(request.model_name)
        except Exception as e:
            yield Failure.of(e)
            return
        loop = asyncio.get_running_loop()
        items: asyncio.Queue[InferenceResponse | Failure | None] = asyncio.Queue()
        engine = self._server.engine

        async def pump() -> None:  # on the engine's loop
            try:
                async for response in engine.infer_stream(request):
                    loop.call_soon_threadsafe(items.put_nowait, response)
            except Exception as e:
                loop.call_soon_threadsafe(items.put_nowait, Failure.of(e))
            finally:
                with contextlib.suppress(RuntimeError):  # the replica's loop is closing
                    loop.call_soon_threadsafe(items.put_nowait, None)

        pumping = self._server.submit(pump())
        try:
            while (item := await items.get()) is not None:
                yield item
        finally:
            pumping.cancel()

    async def call(self, method: str, model: str, *args: Any) -> Any:
        """One of the engine's other calls (CALLS), about `model` ("" for the server)."""
        if method not in CALLS:
            return Failure.of(InternalError(f"the ingress asked for an unknown engine call '{method}'"))
        try:
            if model:
                await self._enter(model)
            result = await self._engine_call(getattr(self._server.engine, method)(*args))
        except Exception as e:
            return Failure.of(e)
        # The configuration is a protobuf message, which does not pickle: it crosses in its wire form.
        return result.SerializeToString() if method == "model_config" else result

    async def record_autoscaling_stats(self) -> dict[str, float]:
        """Ray Serve's custom autoscaling metrics: the requests in this replica's engine (queued or running),
        those that came over the link included, which Ray's own count of ongoing requests does not see; and the
        mean queue time of the requests answered since the last call."""
        # Ray calls this every metrics interval from the replica's start: a replica that only the link will
        # reach (added by autoscaling) reports its address without waiting for a request through Ray.
        self._start_reporting()
        rows = await self._engine_call(self._server.engine.statistics())
        queued_ns = queued = 0
        for row in rows:
            queue = row.get("inference_stats", {}).get("queue", {})
            queued_ns += int(queue.get("ns", 0))
            queued += int(queue.get("count", 0))
        last_ns, last = self._queue_seen
        self._queue_seen = (queued_ns, queued)
        mean_ms = (queued_ns - last_ns) / (queued - last) / 1e6 if queued > last else 0.0
        return {ONGOING_METRIC: float(getattr(self._server.engine, "in_flight", 0)), QUEUE_METRIC: mean_ms}

    async def check_health(self) -> None:
        """Ray Serve's health check: a replica whose engine stopped is replaced."""
        self._start_reporting()  # as in record_autoscaling_stats: for a deployment with a fixed replica count
        if not self._server.running:
            raise RuntimeError("the modelhost engine of this replica is not running")

    # -- statistics --------------------------------------------------------------------------------------------

    def _start_reporting(self) -> None:
        if self._reporter is None:
            self._reporter = asyncio.get_running_loop().create_task(self._report_forever())

    async def _report_forever(self) -> None:
        import ray

        while True:
            if self._collector is None:
                # The ingress makes the collector; one that attaches to deployments made by others may come later.
                with contextlib.suppress(ValueError):
                    self._collector = ray.get_actor(
                        self._settings.statistics_actor, namespace=self._settings.namespace
                    )
            await self._report(final=False)
            await asyncio.sleep(REPORT_INTERVAL_S)

    async def _report(self, final: bool) -> None:
        if self._collector is None:
            return
        try:
            rows, page = await self._engine_call(_statistics_and_metrics(self._server.engine))
            link = "" if final else self.link_address
            await self._touch_used(rows)
            await self._collector.report.remote(
                self._replica_id, self._settings.deployment, rows, page, link, self.held(rows), final
            )
        except Exception as e:  # statistics never fail a replica
            log.debug("statistics report failed: %s", e)

    def held(self, rows: list[dict[str, Any]]) -> tuple[str, ...]:
        """The models this replica serves now (a multiplexed replica: those it has loaded; `rows`: its
        engine's statistics, a row per loaded model version)."""
        return self._settings.models

    async def _touch_used(self, rows: list[dict[str, Any]]) -> None:
        """A multiplexed replica keeps the models used over the link recently used in Ray's eyes too."""

    async def __del__(self) -> None:
        """Ray Serve's graceful shutdown of this replica (scaled in, updated, deleted): its last statistics,
        which withdraw its link; the ingress's next look at the reports stops sending over it; then the engine
        stops, finishing what it holds."""
        if self._reporter is not None:
            self._reporter.cancel()
            await self._report(final=True)
            if self.link_address:
                await asyncio.sleep(LINK_WITHDRAWAL_S)
        await asyncio.to_thread(self._server.stop)


async def _statistics_and_metrics(engine: Any) -> tuple[list[dict[str, Any]], str]:
    """The engine's statistics and its /metrics page (the nv_* families of its models), on the engine's loop."""
    from modelhost.frontends.metrics import render

    rows = await engine.statistics()
    registry = engine.registry  # the Engine itself: the replica runs it in this process
    return rows, render(registry.ready_models(), registry.services.custom_metrics).decode()


async def _open_link(engine: Any, host: str, token: str) -> str:
    """Serve the engine's link on a free TCP port of this node, to whoever presents `token`; its address."""
    from modelhost.transport.server import EngineService

    service = EngineService(engine, lambda hello: None, token)
    await service.start(tcp_host=host)
    service.opened.set()
    return service.address


def _node_address() -> str:
    try:
        import ray

        util: Any = ray.util  # untyped
        return str(util.get_node_ip_address())
    except Exception:  # outside Ray (the unit tests)
        return "127.0.0.1"


def _replica_id() -> str:
    try:
        from ray import serve

        return str(serve.get_replica_context().replica_id.unique_id)
    except Exception:  # outside Ray Serve (the unit tests)
        return f"local-{time.monotonic_ns()}"


class _Loaded:
    """A model a multiplexed replica holds: Ray calls `__del__` when it evicts it (least recently used)."""

    def __init__(self, replica: ModelReplica, name: str) -> None:
        self.replica = replica
        self.name = name
        self.unloaded = False

    def __del__(self) -> None:
        if self.unloaded:
            return
        self.unloaded = True
        getattr(self.replica, "loaded", set()).discard(self.name)
        server = self.replica._server
        if server.running:
            with contextlib.suppress(Exception):
                server.submit(server.engine.unload_model(self.name, {}))


def multiplexed_replica(max_models: int) -> type[ModelReplica]:
    """The replica class of a multiplexed pool keeping at most `max_models` models loaded."""
    from ray import serve

    class MultiplexedReplica(ModelReplica):
        def _initial_models(self) -> tuple[str, ...]:
            return ()

        @serve.multiplexed(max_num_models_per_replica=max_models)  # type: ignore[untyped-decorator]
        async def _model(self, name: str) -> _Loaded:
            await self._engine_call(
                self._server.engine.load_model(
                    name, _load_parameters(self._settings, name), files_base64=False
                )
            )
            self.loaded.add(name)
            return _Loaded(self, name)

        def held(self, rows: list[dict[str, Any]]) -> tuple[str, ...]:
            # Those Ray's multiplexing loaded that the engine still has: its memory budget or idle unloading
            # (server options) may have unloaded some since.
            engine_has = {str(row.get("name")) for row in rows}
            return tuple(sorted(n for n in getattr(self, "loaded", ()) if n in engine_has))

        async def _touch_used(self, rows: list[dict[str, Any]]) -> None:
            # Requests over the link do not pass through Ray's multiplexing, whose least recently used model is
            # the one it evicts: a model answered since the last report is asked for again (a cache hit).
            last = getattr(self, "_last_inference", {})
            now = {str(r.get("name")): int(r.get("last_inference", 0)) for r in rows}
            self._last_inference = now
            for name, when in now.items():
                if name in self.loaded and when > last.get(name, 0):
                    await self._model(name)

        async def _enter(self, model: str) -> None:
            self._start_reporting()
            await self._model(model)
            # Unloaded by the engine itself (its memory budget, idle unloading) while Ray's multiplexing still
            # counts it loaded here: loaded again, as one server loads an evicted model on demand (a pool's models
            # have no config override to keep). A cheap lookup when it is loaded.
            await self._engine_call(self._server.engine.reload_if_evicted(model))

    return MultiplexedReplica


def _load_parameters(settings: ReplicaSettings, name: str) -> dict[str, Any]:
    override = settings.overrides.get(name)
    return {"config": override} if override is not None else {}
