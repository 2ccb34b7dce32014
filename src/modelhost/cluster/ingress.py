"""`modelhost ray serve`: deploy a model repository onto a Ray cluster and answer for it on one address.

The ingress is this process: it joins (or starts) the Ray cluster, deploys the plan's deployments, and serves
KServe v2 HTTP and gRPC with modelhost's own frontends over a `ClusterEngine`, so that tritonclient, `modelhost
perf` and `modelhost tune --url` work unchanged. On SIGINT or SIGTERM it stops accepting, deletes the deployments
it made, and leaves the cluster (a local cluster it started stops with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass, field

from modelhost.cluster.deploy import Cluster, ClusterError
from modelhost.cluster.engine import ClusterEngine
from modelhost.cluster.plan import ClusterPlan
from modelhost.frontends.grpc.server import GrpcServer, grpc_limits
from modelhost.frontends.http.protocol import HttpProtocol, http_limits, start_http_server
from modelhost.frontends.http.routes import HttpRoutes
from modelhost.options import ServerOptions

log = logging.getLogger("modelhost.cluster")


@dataclass
class IngressSettings:
    address: str | None = None  # the Ray cluster; None starts a local one
    num_cpus: int | None = None  # of a local cluster (None: every core)
    http_address: str = "0.0.0.0"
    http_port: int | None = 8000  # None: off; 0: any free port
    grpc_address: str = "0.0.0.0"
    grpc_port: int | None = 8001
    strict_readiness: bool = True
    # Filled in once serving: the ports bound (a port of 0 asked for any).
    bound: dict[str, int] = field(default_factory=dict)


async def serve(plan: ClusterPlan, settings: IngressSettings, stop: asyncio.Event | None = None) -> int:
    cluster = Cluster(plan)
    try:
        await asyncio.to_thread(cluster.connect, settings.address, settings.num_cpus)
        await asyncio.to_thread(cluster.start)
    except ClusterError as e:
        log.error("%s", e)
        return 1
    engine = ClusterEngine(cluster, strict_readiness=settings.strict_readiness)
    stop = stop or asyncio.Event()
    http_server: asyncio.Server | None = None
    connections: set[HttpProtocol] = set()
    grpc_server: GrpcServer | None = None
    try:
        log.info("deploying %d deployment(s) onto Ray Serve", len(plan.deployments))
        failures = await engine.deploy_plan()
        for spec in plan.deployments:
            if spec.name in failures:
                log.error(
                    "deployment '%s' (%s) failed: %s", spec.name, ", ".join(spec.models), failures[spec.name]
                )
            else:
                log.info("deployment '%s' serves %s", spec.name, ", ".join(spec.models))
        defaults = ServerOptions()
        if settings.http_port is not None:
            routes = HttpRoutes(engine, defaults.http_max_input_size, {}, "", None)
            http_server, connections = await start_http_server(
                routes, settings.http_address, settings.http_port, http_limits(defaults)
            )
            settings.bound["http"] = int(http_server.sockets[0].getsockname()[1])
            log.info("Started HTTPService at %s:%d", settings.http_address, settings.bound["http"])
        if settings.grpc_port is not None:
            grpc_server = GrpcServer(engine, grpc_limits(defaults), {}, "")
            settings.bound["grpc"] = await grpc_server.start(settings.grpc_address, settings.grpc_port)
            log.info("Started GRPCInferenceService at %s:%d", settings.grpc_address, settings.bound["grpc"])
    except OSError as e:
        log.error("failed to start the ingress: %s", e)
        stop.set()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    code = 0 if http_server is not None or grpc_server is not None else 1
    await stop.wait()
    log.info("stopping: deleting %d deployment(s)", len(engine.deployment_names))
    engine.accepting = False
    if http_server is not None:
        http_server.close()
    for connection in list(connections):
        connection.close_if_idle()
    if grpc_server is not None:
        await grpc_server.stop(grace=1.0)
    await asyncio.to_thread(cluster.shutdown, engine.deployment_names)
    return code
