"""Starts, watches and stops the frontend processes (--frontend-processes=N), from the engine process.

The engine process is the server's main process: if it dies the server's exit status says so and every frontend
dies with it (PR_SET_PDEATHSIG), so Kubernetes or systemd restarts the whole server. A frontend that dies is
restarted; only its own connections and in-flight requests fail. Frontends run in their own session, so
that a terminal's Ctrl-C reaches the engine alone, which then stops them in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time

import msgspec

from modelhost.engine.engine import Engine
from modelhost.frontends.console.settings import console_settings
from modelhost.frontends.process import FrontendConfig
from modelhost.frontends.tls import grpc_tls, http_tls
from modelhost.options import ServerOptions
from modelhost.transport.messages import Hello
from modelhost.transport.server import EngineService

log = logging.getLogger("modelhost.supervisor")

# A frontend that has not said hello by then failed to start.
_START_TIMEOUT_S = 60.0
# A frontend that keeps dying before it serves is not restarted for ever: the server stops instead.
_MAX_FAILED_STARTS = 5


class FrontendStartError(Exception):
    pass


def reserve_port(host: str, port: int, shared: bool = False) -> socket.socket:
    """A socket bound (not listening) on the HTTP port with SO_REUSEPORT, held while the server runs: it picks
    the port when 0 is asked for, it says at once when the port is taken, and no other server can take the port
    between two frontends' restarts. Only listening sockets get connections, so it takes none.

    `shared` (--reuse-http-port, --reuse-grpc-port): other servers that ask for it may listen on the port too.
    Otherwise the port is first bound without SO_REUSEPORT, which fails where anything holds it: two servers
    that both reuse ports among their own frontends would else share one port unasked."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        if not shared:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind((host, port))
                port = probe.getsockname()[1]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
    except OSError as e:
        # asyncio's words, as the other endpoints' failures say it: which address, and why.
        why = (e.strerror or str(e)).lower()
        raise OSError(e.errno, f"error while attempting to bind on address {(host, port)!r}: {why}") from e
    return sock


class FrontendSupervisor:
    def __init__(
        self,
        options: ServerOptions,
        count: int,
        engine_address: str,
        http_port: int,
        grpc_port: int,
        sagemaker_port: int,
    ) -> None:
        self.count = count
        self._base = FrontendConfig(
            index=0,
            engine_address=engine_address,
            parent_pid=os.getpid(),
            http_address=options.http_address,
            http_port=http_port,
            http_limits=options.http_limits(),
            grpc_limits=options.grpc_limits(),
            http_restricted_api=options.http_restricted_api,
            grpc_restricted_protocol=options.grpc_restricted_protocol,
            http_header_forward_pattern=options.http_header_forward_pattern,
            grpc_header_forward_pattern=options.grpc_header_forward_pattern,
            console=console_settings(options, os.getpid()),
            http_tls=http_tls(options),
            grpc_tls=grpc_tls(options),
            grpc_address=options.grpc_address,
            grpc_port=grpc_port,
            sagemaker_port=sagemaker_port,
            buffer_limit=options.frontend_buffer_byte_size,
            exit_timeout_secs=options.exit_timeout_secs,
            log=options.log_options(),
        )
        self.processes: dict[int, asyncio.subprocess.Process] = {}
        self._said_hello: dict[int, asyncio.Event] = {}
        self._watchers: set[asyncio.Task[None]] = set()
        self._failed_starts = 0
        self.stopping = False
        # Set when the frontends cannot be kept running (one fails to start again and again).
        self.failed = asyncio.Event()

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes.values()]

    def hello(self, hello: Hello) -> None:
        """A frontend listens (the engine's link tells us; a frontend that dies is seen by its watcher)."""
        event = self._said_hello.get(hello.index)
        if event is not None:
            event.set()

    # -- life cycle --------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start every frontend and wait until each listens; FrontendStartError when one cannot."""
        await asyncio.gather(*(self._start(i) for i in range(self.count)))

    async def _start(self, index: int) -> None:
        config = msgspec.structs.replace(self._base, index=index)
        hello = self._said_hello[index] = asyncio.Event()
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "modelhost.frontends.process",
            msgspec.json.encode(config).decode(),
            stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        self.processes[index] = process
        exited = asyncio.ensure_future(process.wait())
        said = asyncio.ensure_future(hello.wait())
        done, _ = await asyncio.wait(
            {exited, said}, timeout=_START_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
        said.cancel()
        if said not in done or not hello.is_set():
            exited.cancel()
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise FrontendStartError(
                f"frontend process {index} failed to start (exit status {process.returncode}); see its log above"
            )
        exited.cancel()
        log.info("frontend process %d (pid %d) is serving", index, process.pid)
        watcher = asyncio.ensure_future(self._watch(index, process))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    async def _watch(self, index: int, process: asyncio.subprocess.Process) -> None:
        code = await process.wait()
        if self.stopping:
            return
        log.warning(
            "frontend process %d (pid %d) exited with status %d; restarting it", index, process.pid, code
        )
        started = time.monotonic()
        while not self.stopping:
            try:
                await self._start(index)
            except FrontendStartError as e:
                self._failed_starts += 1
                log.error("%s", e)
                if self._failed_starts >= _MAX_FAILED_STARTS:
                    log.error("frontend process %d cannot be restarted; stopping the server", index)
                    self.failed.set()
                    return
                await asyncio.sleep(0.5)
                continue
            self._failed_starts = 0
            log.info("frontend process %d restarted in %.2f s", index, time.monotonic() - started)
            return

    def signal_all(self, sig: int) -> None:
        """Send `sig` to every running frontend (SIGHUP: reload the TLS certificates)."""
        for process in self.processes.values():
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(sig)

    async def stop(self, timeout: float) -> bool:
        """SIGTERM every frontend (each stops accepting and finishes its requests) and wait for them; those still
        running at the timeout are killed. False when some had to be killed."""
        self.stopping = True
        for watcher in list(self._watchers):
            watcher.cancel()
        running = [p for p in self.processes.values() if p.returncode is None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        waits = [asyncio.ensure_future(p.wait()) for p in running]
        if not waits:
            return True
        _, late = await asyncio.wait(waits, timeout=timeout + 1.0)
        for process in running:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
        if late:
            await asyncio.wait(late)
        return not late


class Frontends:
    """HTTP, gRPC and SageMaker served by frontend processes: the engine's end of the link, the reserved ports and
    the supervisor. (The metrics port stays with the engine.)"""

    def __init__(self, options: ServerOptions, server: Engine) -> None:
        self.options = options
        self.service = EngineService(server, self._hello)
        self.supervisor: FrontendSupervisor | None = None
        self._ports: list[socket.socket] = []

    def _hello(self, hello: Hello) -> None:
        if self.supervisor is not None:
            self.supervisor.hello(hello)

    def _reserve(self, host: str, port: int, shared: bool = False) -> int:
        sock = reserve_port(host, port, shared)
        self._ports.append(sock)
        return int(sock.getsockname()[1])

    async def start(self) -> None:
        options = self.options
        http_port = (
            self._reserve(options.http_address, options.http_port, options.reuse_http_port)
            if options.allow_http
            else 0
        )
        grpc_port = (
            self._reserve(options.grpc_address, options.grpc_port, options.reuse_grpc_port)
            if options.allow_grpc
            else 0
        )
        sagemaker_port = (
            self._reserve(options.http_address, options.sagemaker_port) if options.allow_sagemaker else 0
        )
        await self.service.start()
        self.supervisor = FrontendSupervisor(
            options, options.frontend_processes, self.service.address, http_port, grpc_port, sagemaker_port
        )
        await self.supervisor.start()
        n = options.frontend_processes
        if http_port:
            log.info(
                "Started HTTPService at %s:%d (%d frontend processes)", options.http_address, http_port, n
            )
        if grpc_port:
            log.info(
                "Started GRPCInferenceService at %s:%d (%d frontend processes)",
                options.grpc_address,
                grpc_port,
                n,
            )

    async def stop(self, timeout: float) -> bool:
        stopped = True if self.supervisor is None else await self.supervisor.stop(timeout)
        self.service.close()
        for sock in self._ports:
            sock.close()
        return stopped


def stop_when_set(failed: asyncio.Event, stop: asyncio.Event) -> asyncio.Task[None]:
    async def wait() -> None:
        await failed.wait()
        stop.set()

    return asyncio.ensure_future(wait())
