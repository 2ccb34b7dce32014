"""Running the server: load the repository, start the frontends, stop cleanly on SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from typing import cast

from modelhost import TRITON_COMPAT_VERSION
from modelhost.backends.api import BackendServices
from modelhost.backends.registry import set_backend_directory
from modelhost.engine.engine import EXTENSIONS, Engine
from modelhost.engine.redis_cache import RedisCache
from modelhost.engine.registry.entries import ControlMode, LoadSettings
from modelhost.engine.registry.registry import ModelRegistry
from modelhost.engine.response_cache import ResponseCache
from modelhost.engine.scheduling.rate_limiter import RateLimiter
from modelhost.engine.shared_memory import RESERVED_PREFIX, SharedMemoryRegistry
from modelhost.errors import Unsupported
from modelhost.frontends.console.settings import console_settings
from modelhost.frontends.grpc.server import GrpcServer
from modelhost.frontends.http.protocol import HttpProtocol, start_http_server
from modelhost.frontends.http.routes import HttpRoutes
from modelhost.frontends.metrics import (
    PolledMetrics,
    configure_metrics,
    render,
    start_metrics_server,
    start_polled_metrics,
)
from modelhost.frontends.sagemaker.routes import SageMakerRoutes
from modelhost.frontends.sagemaker.settings import SageMakerSettings, SageMakerSettingsError
from modelhost.frontends.tls import TlsError, TlsPorts, grpc_tls, http_tls
from modelhost.frontends.vertex_ai.routes import VertexAiRoutes
from modelhost.frontends.vertex_ai.settings import VertexAiSettings, VertexAiSettingsError, default_model
from modelhost.host.devices import gpu_count
from modelhost.host.gpu_memory import startup_notes as gpu_memory_notes
from modelhost.host.host_policy import placements
from modelhost.observability.log_settings import LogSettings
from modelhost.observability.logs import log_table
from modelhost.observability.tracing.sinks import OpenTelemetrySink, TritonFileSink
from modelhost.observability.tracing.tracer import Tracer
from modelhost.options import ServerOptions
from modelhost.options.cache import RedisSettings, parse_cache_config
from modelhost.options.trace import OpenTelemetrySettings, parse_trace_config
from modelhost.repository.sources import RepositoryError, RepositorySource, open_repository
from modelhost.supervisor import Frontends, FrontendStartError, stop_when_set

log = logging.getLogger("modelhost")


# serve() returns this when the exit timeout expired with requests still running.
EXIT_TIMED_OUT = -1


def _options_table(options: ServerOptions, repos: list[RepositorySource]) -> str:
    rows: list[tuple[str, str]] = [
        ("server_id", options.server_id),
        ("server_version", TRITON_COMPAT_VERSION),
        ("server_extensions", " ".join(EXTENSIONS)),
    ]
    rows += [(f"model_repository_path[{i}]", r.url) for i, r in enumerate(repos)]
    rows += [
        ("model_control_mode", f"MODE_{options.model_control_mode.upper()}"),
        ("strict_model_config", str(int(not options.auto_complete_config))),
        ("model_config_name", options.model_config_name or ""),
        ("strict_readiness", str(int(options.strict_readiness))),
        ("exit_timeout", str(options.exit_timeout_secs)),
    ]
    return log_table(["Option", "Value"], rows)


def _rate_limiter(options: ServerOptions) -> RateLimiter | None:
    if options.rate_limit != "execution_count":
        if options.rate_limit_resources:
            log.info("--rate-limit-resource is ignored with --rate-limit=off")
        return None
    return RateLimiter(options.rate_limit_resources)


def _reserved_shm_prefixes(options: ServerOptions) -> tuple[str, ...]:
    """Keys no client may register: Triton's python backend prefix, and the one this server's python backend
    names its own shared memory with (--backend-config=python,shm-region-prefix-name=...)."""
    from modelhost.backends.python.process import StubSettings

    own = StubSettings.from_backend_config(options.backend_config.get("python", {})).shm_region_prefix_name
    return tuple(dict.fromkeys((RESERVED_PREFIX, own)))


def _tracer(options: ServerOptions) -> tuple[Tracer, OpenTelemetrySettings | None]:
    """The tracer --trace-config asks for (checked by ServerOptions): Triton's trace files, or OpenTelemetry."""
    settings, otel = parse_trace_config(options.trace_config)
    if settings.mode == "opentelemetry":
        log.info("tracing to the OpenTelemetry collector at %s", otel.url)
        return Tracer(settings, OpenTelemetrySink(otel)), otel
    if not settings.file:
        return Tracer(settings, None), None
    sink = TritonFileSink(settings.file, lambda: settings.log_frequency)
    tracer = Tracer(settings, sink)
    sink.log_frequency_of = lambda: tracer.global_settings.log_frequency  # the API may change it
    if settings.on:
        log.info("tracing to %s (level %s, rate %d)", settings.file, ",".join(settings.level), settings.rate)
    return tracer, None


def _listen_addresses(bound: asyncio.Server) -> str:
    return ", ".join(f"{s.getsockname()[0]}:{s.getsockname()[1]}" for s in bound.sockets)


@dataclass(eq=False)
class ServeControl:
    """How a program that runs `serve` on a loop of its own (modelhost.Server) reaches it: `ready` is set once it
    serves, with `engine` and the ports bound; setting `stop` stops it as SIGTERM does."""

    stop: asyncio.Event = field(default_factory=asyncio.Event)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    engine: Engine | None = None
    ports: dict[str, int] = field(default_factory=dict)  # "http", "grpc", "metrics": those started in process


async def serve(options: ServerOptions, control: ServeControl | None = None) -> int:
    try:
        repos = [open_repository(url) for url in options.model_repositories]
        sagemaker = SageMakerSettings.from_environ() if options.allow_sagemaker else None
        vertex_ai = VertexAiSettings.from_environ() if options.allow_vertex_ai else None
        # Made (and so checked) before any model loads; with frontend processes each makes its own too.
        tls = TlsPorts(http_tls(options), grpc_tls(options))
    except (RepositoryError, SageMakerSettingsError, VertexAiSettingsError, TlsError) as e:
        log.error("%s", e)
        return 1
    gpus = gpu_count()
    for level, message in gpu_memory_notes(options.gpu_memory(), gpus):
        log.log(level, "%s", message)
    cache_settings = parse_cache_config(options.cache_config, dict(os.environ))  # checked by ServerOptions
    set_backend_directory(options.backend_directory)
    settings = LoadSettings(
        config_name=options.model_config_name,
        auto_complete=options.auto_complete_config,
        backend_config=options.backend_config,
        gpu_count=gpus,
        gpu_memory=options.gpu_memory(),
        load_threads=options.model_load_thread_count,
        load_retries=options.model_load_retry_count,
        rate_limiter=_rate_limiter(options),
        response_cache=cache_settings is not None,
        memory_budget=options.model_memory_budget,
        load_on_demand=options.model_load_on_demand,
        host_policies=placements(options.host_policies),  # checked by ServerOptions
        namespacing=options.model_namespacing,
    )
    mode = options.model_control_mode
    # Before the first load: python models call other models (BLS) and export their own metrics.
    services = BackendServices(loop=asyncio.get_running_loop())
    registry = ModelRegistry(repos, settings, cast(ControlMode, mode), services)  # checked by ServerOptions
    shared_memory = SharedMemoryRegistry(
        allowed=options.allow_client_shm, reserved_prefixes=_reserved_shm_prefixes(options)
    )
    tracer, tracer_otel = _tracer(options)
    response_cache: ResponseCache | RedisCache | None = None
    if isinstance(cache_settings, RedisSettings):
        try:
            response_cache = RedisCache(cache_settings)
        except Unsupported as e:
            log.error("%s", e)
            return 1
        await response_cache.check()
    elif cache_settings is not None:
        response_cache = ResponseCache(cache_settings)
        log.info("response cache: local, %d bytes", cache_settings.size)
    server = Engine(
        registry,
        server_id=options.server_id,
        strict_readiness=options.strict_readiness,
        log_settings=LogSettings(options.log_options()),
        shared_memory=shared_memory,
        tracer=tracer,
        tracer_otel=tracer_otel,
        response_cache=response_cache,
    )
    if control is not None:
        control.engine = server
    configure_metrics(options)  # before the first load too: statistics keep the latency families asked for
    try:
        await registry.start(options.load_models if mode == "explicit" else None)
    except RepositoryError as e:
        log.error("%s", e)
        if options.exit_on_error:
            return 1
        # As tritonserver: it failed to initialize, but with --exit-on-error=false it serves its endpoints,
        # neither live nor ready, so that a probe can tell.
        log.error("failed to initialize the server; serving, not live (--exit-on-error=false)")
        server.live = False
    backends = registry.backend_rows()
    if backends:
        log.info("\n%s", log_table(["Backend", "Path", "Config"], backends))
    log.info("\n%s", log_table(["Model", "Version", "Status"], registry.status_rows()))
    log.info("\n%s", _options_table(options, repos))
    if settings.rate_limiter is not None:
        rows = settings.rate_limiter.rows()
        log.info("Rate limiter on (--rate-limit=execution_count): %d resources in use", len(rows))
        if rows:
            log.info("\n%s", log_table(["Resource", "Device", "Count"], rows))
    if options.model_memory_budget is not None:
        log.info(
            "model memory budget: %d bytes, %d taken by the models loaded at startup",
            options.model_memory_budget,
            registry.memory_in_use(),
        )
    if options.exit_on_error and not registry.all_ready():
        log.error("failed to load all models; exiting (--exit-on-error=true)")
        await asyncio.to_thread(server.close)  # blocking: python models finalize in their processes
        return 1

    http_server: asyncio.Server | None = None
    connections: set[HttpProtocol] = set()
    frontends: Frontends | None = None
    metrics_server: asyncio.Server | None = None
    metrics_pollers: list[asyncio.Task[None]] = []  # CPU / GPU families, every --metrics-interval-ms
    grpc_server: GrpcServer | None = None
    sagemaker_server: asyncio.Server | None = None
    vertex_ai_server: asyncio.Server | None = None

    async def stop_serving() -> bool:  # what has been started by the time it is called
        return await _stop(
            server,
            [http_server, sagemaker_server, vertex_ai_server],
            connections,
            frontends,
            metrics_server,
            grpc_server,
            options.exit_timeout_secs,
        )

    try:
        if options.frontend_processes > 0 and (
            options.allow_http or options.allow_grpc or sagemaker is not None
        ):
            frontends = Frontends(options, server)
            await frontends.start()
        elif options.allow_http:
            routes = HttpRoutes(
                server,
                options.http_max_input_size,
                options.http_restricted_api,
                options.http_header_forward_pattern,
                console_settings(options, os.getpid()),
            )
            # Accepting once every endpoint is bound: a probe that finds HTTP ready finds the rest bound too,
            # and a taken gRPC or metrics port stops the server before anything was answered.
            http_server, connections = await start_http_server(
                routes,
                options.http_address,
                options.http_port,
                options.http_limits(),
                reuse_port=options.reuse_http_port,
                ssl=tls.http,
                start_serving=False,
            )
            log.info("Started HTTPService at %s", _listen_addresses(http_server))
        # After the frontend processes: a process started while gRPC threads run gets grpc's fork warnings.
        if options.allow_grpc and frontends is None:
            grpc_server = GrpcServer(
                server,
                options.grpc_limits(),
                options.grpc_restricted_protocol,
                options.grpc_header_forward_pattern,
            )
            grpc_port = await grpc_server.start(
                options.grpc_address, options.grpc_port, reuse_port=options.reuse_grpc_port, ssl=tls.grpc
            )
            log.info("Started GRPCInferenceService at %s:%d", options.grpc_address, grpc_port)
            if control is not None:
                control.ports["grpc"] = grpc_port
        if sagemaker is not None and frontends is None:
            sagemaker_routes = SageMakerRoutes(
                server,
                HttpRoutes(server, options.http_max_input_size, options.http_restricted_api),
                sagemaker,
            )
            sagemaker_server, _ = await start_http_server(
                sagemaker_routes,
                options.http_address,
                options.sagemaker_port,
                options.http_limits(),
                connections=connections,
                ssl=tls.http,  # closed at shutdown with the HTTP endpoint's
            )
            log.info("Started Sagemaker HTTPService at %s", _listen_addresses(sagemaker_server))
        polled: list[PolledMetrics] = []
        if options.allow_metrics:
            polled, metrics_pollers = start_polled_metrics(options)
            if server.response_cache is not None:
                polled.append(server.response_cache)  # nv_cache_* of the response cache
            metrics_server = await start_metrics_server(
                registry.ready_models,
                options.metrics_address,
                options.metrics_port,
                registry.services.custom_metrics,
                polled,
            )
            log.info("Started Metrics Service at %s", _listen_addresses(metrics_server))
            if control is not None:
                control.ports["metrics"] = int(metrics_server.sockets[0].getsockname()[1])
        if vertex_ai is not None:
            # In this process whatever --frontend-processes: one port, which Vertex AI's own load balancer feeds.
            ready_names = [str(row["name"]) for row in await server.repository_index(ready_only=True)]
            vertex_routes = VertexAiRoutes(
                HttpRoutes(server, options.http_max_input_size, options.http_restricted_api),
                vertex_ai,
                default_model(options.vertex_ai_default_model, sorted(set(ready_names))),
                lambda: render(registry.ready_models(), registry.services.custom_metrics, polled),
            )
            vertex_ai_server, _ = await start_http_server(
                vertex_routes,
                options.http_address,
                options.vertex_ai_port,
                options.http_limits(),
                connections=connections,
                ssl=tls.http,
            )
            log.info("Started Vertex AI HTTPService at %s", _listen_addresses(vertex_ai_server))
        if http_server is not None:
            await http_server.start_serving()
            if control is not None:
                control.ports["http"] = int(http_server.sockets[0].getsockname()[1])
    except (OSError, FrontendStartError, VertexAiSettingsError) as e:
        log.error("failed to start the server: %s", e)
        # Nothing was accepted yet; the frontend processes started so far get the usual time to exit. The calls
        # they hold until the server has started are let through now, to be answered as a stopping server
        # answers: held, they would keep their frontend, and the stop, waiting out the whole exit timeout.
        if frontends is not None:
            frontends.service.opened.set()
        await stop_serving()
        return 1

    stop = asyncio.Event() if control is None else control.stop
    loop = asyncio.get_running_loop()
    # Off the main thread (modelhost.Server) no handler can be set: asyncio says RuntimeError, uvloop ValueError.
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    if tls:

        def reload_certificates() -> None:
            tls.reload()
            if frontends is not None and frontends.supervisor is not None:
                frontends.supervisor.signal_all(signal.SIGHUP)

        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGHUP, reload_certificates)
    poller: asyncio.Task[None] | None = None
    if mode == "poll" and options.repository_poll_secs > 0:
        poller = asyncio.create_task(registry.poll_forever(options.repository_poll_secs))
    elif options.model_idle_unload_secs > 0:
        poller = asyncio.create_task(registry.unload_idle_forever(options.model_idle_unload_secs))
    failure_watch: asyncio.Task[None] | None = None
    if frontends is not None and frontends.supervisor is not None:
        # Frontends that cannot be kept running stop the server.
        failure_watch = stop_when_set(frontends.supervisor.failed, stop)
    if frontends is not None:
        frontends.service.opened.set()
    if control is not None:
        control.ready.set()
    # What was allocated while starting (models, configs, modules) lives until the end: out of every collection.
    gc.freeze()
    await stop.wait()
    if failure_watch is not None:
        failure_watch.cancel()
    if poller is not None:
        poller.cancel()
    for task in metrics_pollers:
        task.cancel()
    await asyncio.gather(*metrics_pollers, return_exceptions=True)
    log.info(
        "Received a stop signal: no new requests, waiting up to %d s for %d in flight",
        options.exit_timeout_secs,
        server.in_flight,
    )
    drained = await stop_serving()
    if frontends is not None and frontends.supervisor is not None and frontends.supervisor.failed.is_set():
        return 1
    return 0 if drained else EXIT_TIMED_OUT


def _log_in_flight(server: Engine, deadline: float) -> None:
    busy = server.registry.busy_versions()
    left_s = max(0, round(deadline - time.monotonic()))
    log.info("Timeout %d: Found %d model versions that have in-flight inferences", left_s, len(busy))
    for name, version, count in busy:
        log.info("Model '%s' (version %d) has %d in-flight inferences", name, version, count)


async def _log_in_flight_every_second(server: Engine, deadline: float) -> None:
    while True:
        _log_in_flight(server, deadline)
        await asyncio.sleep(1.0)


async def _stop(
    server: Engine,
    http_servers: list[asyncio.Server | None],
    connections: set[HttpProtocol],
    frontends: Frontends | None,
    metrics_server: asyncio.Server | None,
    grpc_server: GrpcServer | None,
    timeout: float,
) -> bool:
    """Stop serving; False when requests were still running at the timeout. It logs Triton's shutdown lines,
    which scripts waiting for a clean stop look for."""
    log.info("Waiting for in-flight requests to complete.")
    deadline = time.monotonic() + timeout
    # The ports stay open while the requests in flight finish: a new inference request is answered UNAVAILABLE
    # in Triton's words ("Server is stopping, ..."), readiness is false, the other endpoints keep answering.
    # (Triton's gRPC port does the same; its HTTP port takes no new connection then, and modelhost's answers
    # them rather than refusing them.)
    # Triton's account of what it waits for, once a second while it does, and once when done.
    watch = asyncio.create_task(_log_in_flight_every_second(server, deadline))
    try:
        drained = await server.drain(timeout)
        if frontends is not None:
            # Then the frontends, which served meanwhile (the engine answering new requests UNAVAILABLE), stop
            # accepting and send the answers they still have.
            frontends_done = await frontends.stop(max(1.0, deadline - time.monotonic()))
            drained = drained and frontends_done
    finally:
        watch.cancel()
    _log_in_flight(server, deadline)
    if not drained:
        log.warning("exit timeout expired with %d requests still in flight", server.in_flight)
    for http_server in http_servers:
        if http_server is not None:
            http_server.close()  # no new connections; open ones finish what they have
    for connection in list(connections):
        connection.close_if_idle()
    if grpc_server is not None:
        await grpc_server.stop(grace=1.0 if drained else 0)
    if metrics_server is not None:
        metrics_server.close()
    if isinstance(server.response_cache, RedisCache):
        await server.response_cache.close()
    await asyncio.to_thread(
        server.tracer.close
    )  # the trace file is written now (log-frequency 0), or flushed
    if drained:
        log.info("All models are stopped, unloading models")
        await asyncio.to_thread(
            server.close
        )  # with requests still running, their instances are left to the process exit
        # Triton's closing line; the listeners are closed and every version is unloaded by now.
        log.info(
            "Timeout %d: Found %d live models and 0 in-flight non-inference requests",
            max(0, round(deadline - time.monotonic())),
            sum(1 for entry in server.registry.models.values() if entry.serving()),
        )
    log.info("server stopped")
    return drained


def run_server(options: ServerOptions) -> int:
    """Run until SIGINT/SIGTERM; the process exit code."""
    try:
        import uvloop

        code = uvloop.run(serve(options))
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        code = asyncio.run(serve(options))
    if code == EXIT_TIMED_OUT:
        # --exit-timeout-secs is a promise: do not wait for runtime calls still in progress on worker threads.
        logging.shutdown()
        os._exit(0)
    return code
