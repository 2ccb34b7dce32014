"""A frontend process (--frontend-processes=N): HTTP and gRPC on the shared ports, the engine over the transport.

Started by `modelhost.supervisor` as `python -m modelhost.frontends.process CONFIG_JSON`. It owns sockets and wire
work and no model state: it dies with the engine (PR_SET_PDEATHSIG, and the link closing), and on SIGTERM it
stops accepting, finishes what it has in flight within the exit timeout, and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import os
import signal
import sys

import msgspec

from modelhost.frontends.console.settings import ConsoleSettings
from modelhost.frontends.grpc.server import GrpcServer
from modelhost.frontends.http.buffer import BufferLimit
from modelhost.frontends.http.protocol import HttpProtocol, start_http_server
from modelhost.frontends.http.routes import HttpRoutes
from modelhost.frontends.sagemaker.routes import SageMakerRoutes
from modelhost.frontends.sagemaker.settings import SageMakerSettings
from modelhost.frontends.tls import TlsError, TlsFiles, TlsPorts
from modelhost.observability.log_settings import LogSettings
from modelhost.observability.logs import configure_logging
from modelhost.options import LogOptions
from modelhost.options.limits import GrpcLimits, HttpLimits
from modelhost.transport.client import connect

log = logging.getLogger("modelhost.frontend")

_PR_SET_PDEATHSIG = 1
# Exit status when the engine went away: the supervisor is gone with it, so nobody restarts this process.
ENGINE_LOST = 3


class FrontendConfig(msgspec.Struct):
    index: int
    engine_address: str
    parent_pid: int
    # The HTTP port to serve (0: HTTP is off).
    http_address: str
    http_port: int
    # The limits of each protocol's connections, as the engine's flags set them.
    http_limits: HttpLimits
    grpc_limits: GrpcLimits
    # --http-restricted-api and --grpc-restricted-protocol: category -> (header, value).
    http_restricted_api: dict[str, tuple[str, str]]
    grpc_restricted_protocol: dict[str, tuple[str, str]]
    # --http-header-forward-pattern, --grpc-header-forward-pattern ("": none forwarded).
    http_header_forward_pattern: str
    grpc_header_forward_pattern: str
    # The web console's settings (None: --http-console=false).
    console: ConsoleSettings | None
    # The gRPC port to serve too (0: gRPC is off).
    grpc_address: str
    grpc_port: int
    # TLS of the HTTP (and SageMaker) and gRPC ports; None: cleartext.
    http_tls: TlsFiles | None
    grpc_tls: TlsFiles | None
    # The SageMaker port to serve too (0: off); its settings come from the environment, as the engine read them.
    sagemaker_port: int
    buffer_limit: int
    exit_timeout_secs: int
    log: LogOptions


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the engine process ends, however it ends."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the engine died before the line above ran
        os._exit(ENGINE_LOST)


async def serve(config: FrontendConfig) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    code = 0

    def engine_lost() -> None:
        nonlocal code
        if not stop.is_set():
            log.error("frontend %d: the engine process is gone; exiting", config.index)
            code = ENGINE_LOST
            stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        tls = TlsPorts(config.http_tls, config.grpc_tls)
    except TlsError as e:
        log.error("frontend %d: %s", config.index, e)
        return 1
    if tls:
        loop.add_signal_handler(signal.SIGHUP, tls.reload)  # the engine passes its SIGHUP on
    # The logging extension's changes, made through any frontend, reach every process: the engine tells each.
    log_settings = LogSettings(config.log)
    engine = await connect(
        config.engine_address, engine_lost, lambda changes: log_settings.update(changes, announce=False)
    )
    routes = BufferLimit(
        HttpRoutes(
            engine,
            config.http_limits.max_body,
            config.http_restricted_api,
            config.http_header_forward_pattern,
            config.console,
        ),
        engine,
        config.buffer_limit,
    )
    http_server: asyncio.Server | None = None
    sagemaker_server: asyncio.Server | None = None
    connections: set[HttpProtocol] = set()
    grpc_server: GrpcServer | None = None
    try:
        if config.http_port:
            http_server, connections = await start_http_server(
                routes,
                config.http_address,
                config.http_port,
                config.http_limits,
                reuse_port=True,
                ssl=tls.http,
            )
        if config.grpc_port:
            grpc_server = GrpcServer(
                engine,
                config.grpc_limits,
                config.grpc_restricted_protocol,
                config.grpc_header_forward_pattern,
            )
            await grpc_server.start(config.grpc_address, config.grpc_port, reuse_port=True, ssl=tls.grpc)
        if config.sagemaker_port:
            sagemaker = SageMakerRoutes(
                engine,
                HttpRoutes(engine, config.http_limits.max_body, config.http_restricted_api),
                SageMakerSettings.from_environ(),
            )
            sagemaker_server, _ = await start_http_server(
                sagemaker,
                config.http_address,
                config.sagemaker_port,
                config.http_limits,
                reuse_port=True,
                connections=connections,
                ssl=tls.http,
            )
    except OSError as e:
        log.error("frontend %d: failed to start serving: %s", config.index, e)
        return 1
    engine.hello(config.index, os.getpid())
    # Everything allocated so far lives as long as the process: keep it out of every collection.
    gc.freeze()
    await stop.wait()
    engine.cancels = False
    if code == 0:
        # The port stays open while this frontend's requests finish (Triton's behaviour): the engine, which has
        # stopped accepting before it signals the frontends, answers new inference requests UNAVAILABLE.
        deadline = loop.time() + config.exit_timeout_secs
        while engine.in_flight and loop.time() < deadline:
            await asyncio.sleep(0.01)
    for server in (http_server, sagemaker_server):
        if server is not None:
            server.close()
    for connection in list(connections):
        connection.close_if_idle()
    if grpc_server is not None:
        await grpc_server.stop(grace=1.0 if code == 0 else 0)
    return code


def main(argv: list[str]) -> int:
    config = msgspec.json.decode(argv[0], type=FrontendConfig)
    _die_with_parent(config.parent_pid)
    configure_logging(config.log)
    try:
        import uvloop

        return int(uvloop.run(serve(config)))
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.run(serve(config))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
