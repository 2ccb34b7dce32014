"""A frontend process (--frontend-processes=N): HTTP on the shared port, the engine over the transport.

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

from modelhost.frontends.http.forwarding import ForwardingRoutes
from modelhost.frontends.http.protocol import start_http_server
from modelhost.logs import configure_logging
from modelhost.options import ServerOptions
from modelhost.transport.frontend_side import connect

log = logging.getLogger("modelhost.frontend")

_PR_SET_PDEATHSIG = 1
# Exit status when the engine went away: the supervisor is gone with it, so nobody restarts this process.
ENGINE_LOST = 3


class FrontendConfig(msgspec.Struct):
    index: int
    engine_address: str
    parent_pid: int
    http_address: str
    http_port: int
    http_max_input_size: int
    buffer_limit: int
    exit_timeout_secs: int
    log_verbose: int
    log_info: bool
    log_warning: bool
    log_error: bool
    log_format: str
    log_file: str | None


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
    engine = await connect(config.engine_address, engine_lost)
    routes = ForwardingRoutes(engine, config.buffer_limit)
    try:
        http_server, connections = await start_http_server(
            routes, config.http_address, config.http_port, config.http_max_input_size, reuse_port=True
        )
    except OSError as e:
        log.error("frontend %d: failed to start the HTTP server: %s", config.index, e)
        return 1
    engine.hello(config.index, os.getpid())
    # Everything allocated so far lives as long as the process: keep it out of every collection.
    gc.freeze()
    await stop.wait()
    if code == 0:
        # The port stays open while this frontend's requests finish (Triton's behaviour): the engine, which has
        # stopped accepting before it signals the frontends, answers new inference requests UNAVAILABLE.
        deadline = loop.time() + config.exit_timeout_secs
        while engine.in_flight and loop.time() < deadline:
            await asyncio.sleep(0.01)
    http_server.close()
    for connection in list(connections):
        connection.close_if_idle()
    return code


def main(argv: list[str]) -> int:
    config = msgspec.json.decode(argv[0], type=FrontendConfig)
    _die_with_parent(config.parent_pid)
    configure_logging(
        ServerOptions(
            log_verbose=config.log_verbose,
            log_info=config.log_info,
            log_warning=config.log_warning,
            log_error=config.log_error,
            log_format=config.log_format,
            log_file=config.log_file,
        )
    )
    try:
        import uvloop

        return int(uvloop.run(serve(config)))
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.run(serve(config))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
