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
import os
import signal
from dataclasses import dataclass, field

from modelhost.cluster.deploy import Cluster, ClusterError
from modelhost.cluster.engine import ClusterEngine
from modelhost.cluster.plan import ClusterPlan
from modelhost.cluster.replica import REPORT_INTERVAL_S, TOKEN_VARIABLE
from modelhost.cluster.sizing import measure, sized
from modelhost.frontends.grpc.server import GrpcServer
from modelhost.frontends.http.messages import HttpRequest, HttpResponse, error_response
from modelhost.frontends.http.protocol import HttpProtocol, start_http_server
from modelhost.frontends.http.routes import HttpRoutes
from modelhost.frontends.tls import TlsError, TlsPorts, grpc_tls, http_tls
from modelhost.options import ServerOptions
from modelhost.options.limits import HttpLimits

log = logging.getLogger("modelhost.cluster")

# How often the ingress checks that the Ray cluster answers, and after how many misses in a row it gives up.
WATCH_INTERVAL_S = 2.0
WATCH_TIMEOUT_S = 5.0
WATCH_MISSES = 3
# The exit code once the cluster is gone.
CLUSTER_LOST = 1


@dataclass
class IngressSettings:
    address: str | None = None  # the Ray cluster; None starts a local one
    num_cpus: int | None = None  # of a local cluster (None: every core)
    http_address: str = "0.0.0.0"
    http_port: int | None = 8000  # None: off; 0: any free port
    grpc_address: str = "0.0.0.0"
    grpc_port: int | None = 8001
    metrics_address: str = "0.0.0.0"
    metrics_port: int | None = 8002
    strict_readiness: bool = True
    # Route to the plan's applications as deployed by others (a RayService) instead of deploying them.
    attach: bool = False
    # The HTTP and gRPC ports' TLS, restricted APIs, header forwarding and limits (`modelhost serve`'s flags).
    frontend: ServerOptions = field(default_factory=ServerOptions)
    # Filled in once serving: the ports bound (a port of 0 asked for any).
    bound: dict[str, int] = field(default_factory=dict)


async def serve(plan: ClusterPlan, settings: IngressSettings, stop: asyncio.Event | None = None) -> int:
    options = settings.frontend
    try:  # a certificate that cannot be used stops the ingress before it joins the cluster
        tls = TlsPorts(http_tls(options), grpc_tls(options))
    except TlsError as e:
        log.error("%s", e)
        return 1
    cluster = Cluster(plan)
    if settings.attach:  # the replicas were given the token by their environment, not by this ingress
        cluster.link_token = os.environ.get(TOKEN_VARIABLE, "")
    try:
        await asyncio.to_thread(cluster.connect, settings.address, settings.num_cpus)
        await asyncio.to_thread(cluster.start)
    except ClusterError as e:
        log.error("%s", e)
        return 1
    if not settings.attach:
        # The replicas' memory reservations, from the models themselves (actor memory: measured).
        cluster.plan = sized(plan, await asyncio.to_thread(measure, plan))
        for spec in cluster.plan.deployments:
            if "memory" in spec.actor:
                log.info("deployment '%s' reserves %d MiB a replica", spec.name, spec.actor["memory"] >> 20)
    engine = ClusterEngine(cluster, strict_readiness=settings.strict_readiness)
    stop = stop or asyncio.Event()
    http_server: asyncio.Server | None = None
    connections: set[HttpProtocol] = set()
    grpc_server: GrpcServer | None = None
    metrics_server: asyncio.Server | None = None
    failed = False
    try:
        if settings.attach:
            await engine.attach_plan()
            log.info("serving %d deployment(s) deployed by others", len(cluster.plan.deployments))
            if not cluster.link_token:
                log.warning(
                    "%s is not set: inference goes through Ray Serve's handles (set the same value here and "
                    "in the Ray containers for modelhost's link)",
                    TOKEN_VARIABLE,
                )
        else:
            log.info("deploying %d deployment(s) onto Ray Serve", len(cluster.plan.deployments))
            failures = await engine.deploy_plan()
            for spec in cluster.plan.deployments:
                if spec.name in failures:
                    log.error(
                        "deployment '%s' (%s) failed: %s",
                        spec.name,
                        ", ".join(spec.models),
                        failures[spec.name],
                    )
                else:
                    log.info("deployment '%s' serves %s", spec.name, ", ".join(spec.models))
        if settings.http_port is not None:
            routes = HttpRoutes(
                engine,
                options.http_max_input_size,
                options.http_restricted_api,
                options.http_header_forward_pattern,
                None,
            )
            http_server, connections = await start_http_server(
                routes, settings.http_address, settings.http_port, options.http_limits(), ssl=tls.http
            )
            settings.bound["http"] = int(http_server.sockets[0].getsockname()[1])
            log.info("Started HTTPService at %s:%d", settings.http_address, settings.bound["http"])
        if settings.grpc_port is not None:
            grpc_server = GrpcServer(
                engine,
                options.grpc_limits(),
                options.grpc_restricted_protocol,
                options.grpc_header_forward_pattern,
            )
            settings.bound["grpc"] = await grpc_server.start(
                settings.grpc_address, settings.grpc_port, ssl=tls.grpc
            )
            log.info("Started GRPCInferenceService at %s:%d", settings.grpc_address, settings.bound["grpc"])
        if settings.metrics_port is not None:
            metrics_server = await _start_metrics(engine, settings.metrics_address, settings.metrics_port)
            settings.bound["metrics"] = int(metrics_server.sockets[0].getsockname()[1])
            log.info("Started Metrics Service at %s:%d", settings.metrics_address, settings.bound["metrics"])
    except OSError as e:
        log.error("failed to start the ingress: %s", e)
        failed = True
        stop.set()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    if tls:  # SIGHUP: the ports' certificates again from their files, connections kept (as `modelhost serve`)
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGHUP, tls.reload)
    code = 1 if failed or (http_server is None and grpc_server is None) else 0
    lost = asyncio.Event()
    watch = asyncio.create_task(_watch_cluster(cluster, lost, stop))
    links = asyncio.create_task(engine.refresh_links_forever(REPORT_INTERVAL_S))
    await stop.wait()
    watch.cancel()
    links.cancel()
    engine.accepting = False
    for server in (http_server, metrics_server):
        if server is not None:
            server.close()
    for connection in list(connections):
        connection.close_if_idle()
    if grpc_server is not None:
        await grpc_server.stop(grace=1.0)
    if lost.is_set():
        # Nothing is left to delete, and this process cannot end normally: the worker threads still in Ray's
        # calls (which the loop's shutdown joins) and Ray's exit handlers wait for the head for a minute or more.
        logging.shutdown()
        os._exit(CLUSTER_LOST)
    mine = [] if settings.attach else engine.deployment_names
    log.info("stopping: deleting %d deployment(s)", len(mine))
    await asyncio.to_thread(cluster.shutdown, mine, settings.attach)
    return code


async def _start_metrics(engine: ClusterEngine, host: str, port: int) -> asyncio.Server:
    """/metrics: the replicas' nv_* families, summed over the replicas of each model."""

    async def handle(request: HttpRequest) -> HttpResponse:
        if request.path != "/metrics":
            return error_response(404, "Not Found")
        if request.method != "GET":
            return error_response(405, "Method Not Allowed")
        page = await engine.metrics_page()
        return HttpResponse(200, page, content_type="text/plain; charset=utf-8; version=0.0.4")

    server, _ = await start_http_server(handle, host, port, HttpLimits(max_body=1 << 16))
    return server


async def _watch_cluster(cluster: Cluster, lost: asyncio.Event, stop: asyncio.Event) -> None:
    """Stop with an error once the Ray cluster's head stops accepting connections (it is gone), rather than serve
    errors. The check is a TCP connection to the head's GCS, not a Ray call: Ray's calls can take seconds on a
    busy cluster, which must not pass for a lost one."""
    host, _, port = (await asyncio.to_thread(cluster.gcs_address)).rpartition(":")
    misses = 0
    while True:
        await asyncio.sleep(WATCH_INTERVAL_S)
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), WATCH_TIMEOUT_S)
            writer.close()
            misses = 0
        except (OSError, TimeoutError) as e:  # refused at once when the head died; no answer when it vanished
            misses += 1
            if misses >= WATCH_MISSES:
                log.error(
                    "lost the Ray cluster (its head at %s:%s refused or did not answer %d times: %s); exiting",
                    host,
                    port,
                    misses,
                    str(e) or type(e).__name__,
                )
                lost.set()
                stop.set()
                return
