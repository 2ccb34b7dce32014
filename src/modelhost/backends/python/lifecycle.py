"""The stub process of one python model instance over its life: started (blocking, on a loading thread: spawned,
its model initialized), its socket handed to the event loop, killed for a request timeout, restarted when it dies
(what it had in flight failed; the instance is not healthy, its model not ready, until the new stub has
initialized), asked the model's `is_ready()`, and finalized and ended when the instance closes."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import Any

from modelhost.backends.api import BackendServices
from modelhost.backends.python import ipc
from modelhost.backends.python.bls import ModelCalls
from modelhost.backends.python.environments import PythonEnvironment
from modelhost.backends.python.ipc import Arena
from modelhost.backends.python.process import (
    Stub,
    StubFailed,
    StubProtocol,
    StubSettings,
    exchange,
    spawn_stub,
    stub_numbers,
)
from modelhost.errors import InternalError, ModelhostError
from modelhost.host.host_policy import bound, placement_of

log = logging.getLogger("modelhost.python")

READY_CHECK_TIMEOUT_S = 5.0


class StubSupervisor:
    """`init` is the message that initializes the model in a new stub; `on_message` takes every other message of
    the stub's; `owner` is the instance, whose host placement (--host-policy) a restarted stub gets too."""

    def __init__(
        self,
        owner: object,
        name: str,
        model_name: str,
        settings: StubSettings,
        environment: PythonEnvironment,
        services: BackendServices,
        calls: ModelCalls,
        init: dict[str, Any],
        on_message: Callable[[Stub, dict[str, Any]], None],
    ) -> None:
        self._owner = owner
        self.name = name
        self.model_name = model_name
        self.settings = settings
        self.environment = environment
        self.services = services
        self.calls = calls
        self._init = init
        self._on_message = on_message
        self._ids = itertools.count(1)
        self._has_is_ready = False
        self._ready_checks: dict[int, asyncio.Future[bool]] = {}
        self._healthy = threading.Event()
        # While a stub is restarted, and why the last restart failed: jobs wait for the one, fail with the other.
        self.restart: asyncio.Task[None] | None = None
        self.failure: str | None = None
        self._closed = False
        self.stub = self._start_stub()
        self._attach(self.stub)

    # -- health ------------------------------------------------------------------------------------------------

    @property
    def healthy(self) -> bool:
        return self._healthy.is_set() and not self._closed

    # -- starting a stub (blocking: a loading thread, or a worker thread during a restart) ---------------------

    def _start_stub_placed(self) -> Stub:
        # Where the first one was started: the host policy (--host-policy) of this instance, if any.
        with bound(placement_of(self._owner)):
            return self._start_stub()

    def _start_stub(self) -> Stub:
        number = next(stub_numbers)
        settings = self.settings
        process, sock, prefix = spawn_stub(settings, number, self.environment)
        stub = Stub(
            number,
            self.name,
            prefix,
            process,
            sock,
            Arena(prefix + "p_", settings.shm_default_byte_size, settings.shm_growth_byte_size),
        )
        try:
            reply = exchange(
                stub.sock,
                stub.process,
                self._init,
                "init_done",
                settings.stub_timeout_seconds,
                f"model instance '{self.name}' of model '{self.model_name}'",
                lambda message: self._on_message_while_starting(stub, message),
                unbounded_after="initializing",
            )
            if reply.get("error"):
                # Triton's reason, which names the file and line in the model that failed.
                raise StubFailed(f"Internal: {reply['error']}")
            self._has_is_ready = bool(reply.get("has_is_ready"))
        except BaseException:
            self._kill(stub)
            raise
        self._healthy.set()
        return stub

    def _on_message_while_starting(self, stub: Stub, message: dict[str, Any]) -> None:
        if message["op"] == "control":
            self.calls.on_control_while_starting(stub, message)
        else:
            self._on_message(stub, message)

    def _attach(self, stub: Stub) -> None:
        """Hand a new stub's socket to the event loop, from the loading thread."""
        loop = self.services.loop
        if loop is None:
            self._kill(stub)
            raise StubFailed("the python backend runs only inside a server (no event loop to serve it)")
        future = asyncio.run_coroutine_threadsafe(self._attach_async(stub), loop)
        future.result(self.settings.stub_timeout_seconds)

    async def _attach_async(self, stub: Stub) -> None:
        loop = asyncio.get_running_loop()
        stub.sock.setblocking(False)
        transport, _ = await loop.create_connection(
            lambda: StubProtocol(stub, self._on_message, self.on_stub_lost), sock=stub.sock
        )
        stub.transport = transport

    def _kill(self, stub: Stub) -> None:
        with contextlib.suppress(ProcessLookupError):
            stub.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            stub.process.wait(5)
        stub.sock.close()
        stub.segments.close()
        stub.arena.close()
        self._unlink_stub_segments(stub)

    def _unlink_stub_segments(self, stub: Stub) -> None:
        """The stub's own shared memory, left behind when it dies without cleaning up."""
        prefix = stub.prefix + "s_"
        with contextlib.suppress(OSError):
            for name in os.listdir(ipc.SHM_DIR):
                if name.startswith(prefix):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(ipc.SHM_DIR, name))

    # -- failures and restarts ---------------------------------------------------------------------------------

    def on_timeout(self, stub: Stub, timeout_us: int) -> None:
        log.error(
            "model instance '%s' of '%s' exceeded a request timeout of %d us: restarting its stub process",
            self.name,
            self.model_name,
            timeout_us,
        )
        stub.killed_after_answer = True
        with contextlib.suppress(ProcessLookupError):
            stub.process.send_signal(signal.SIGKILL)  # the loss of its connection then restarts it

    def on_stub_lost(self, stub: Stub) -> None:
        if stub.closing or self._closed:
            return
        self._healthy.clear()
        code = stub.process.poll()
        if code is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = stub.process.wait(1)
        error = InternalError(
            f"Failed to process the request(s) for model '{self.model_name}': the stub process of instance "
            f"'{self.name}' exited unexpectedly (exit code {code}); it is being restarted"
        )
        log.error("%s", error)
        # Restarting before the answers below: a job the pool hands over meanwhile then waits for the new stub.
        self.restart = asyncio.get_running_loop().create_task(self._restart_stub())
        sent = list(stub.executing.values())
        stub.executing.clear()
        # The stub runs its batches one at a time in the order sent, so only the oldest can have begun: it fails
        # with its in-flight requests; the rest go to the restarted stub as though never sent. A decoupled model's
        # execute returns before its responses, so its requests already under way are those of `stub.sinks`.
        begun = 0 if stub.killed_after_answer else 1
        for batch in sent[:begun]:
            batch.on_reply({"error": str(error)})
        for batch in sent[begun:]:
            batch.resend()
        for sink in stub.sinks.values():
            sink.put(None, error, final=True)
        stub.sinks.clear()
        for task in list(stub.tasks.values()):
            task.cancel()
        self.services.custom_metrics.forget_stub(stub.number)
        self._kill(stub)

    async def _restart_stub(self) -> None:
        try:
            stub = await asyncio.to_thread(self._start_stub_placed)
            await self._attach_async(stub)
        except ModelhostError as e:
            self.failure = str(e)
            log.error("model instance '%s' could not be restarted: %s", self.name, e)
            return
        if self._closed:
            self._kill(stub)
            return
        self.stub = stub
        self.failure = None
        log.info("model instance '%s' of '%s' restarted", self.name, self.model_name)

    async def ready_stub(self) -> Stub:
        """The stub to send to once a restart under way has ended; StubFailed if it failed."""
        if self.restart is not None and not self.restart.done():
            await asyncio.shield(self.restart)
        if self.failure is not None:
            raise StubFailed(self.failure)
        return self.stub

    # -- is_ready and close ------------------------------------------------------------------------------------

    async def check_ready(self) -> bool:
        """The model's own `is_ready()` (when it has one), asked in its process, 5 s at most (as Triton)."""
        if not self.healthy:
            return False
        if not self._has_is_ready:
            return True
        check_id = next(self._ids)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._ready_checks[check_id] = future
        try:
            self.stub.send({"op": "is_ready", "id": check_id})
            return await asyncio.wait_for(future, READY_CHECK_TIMEOUT_S)
        except (TimeoutError, StubFailed):
            return False
        finally:
            self._ready_checks.pop(check_id, None)

    def on_ready_done(self, message: dict[str, Any]) -> None:
        check = self._ready_checks.pop(message["id"], None)
        if check is not None and not check.done():
            check.set_result(bool(message["ready"]))

    def on_finalized(self, stub: Stub, message: dict[str, Any]) -> None:
        if message.get("error"):
            log.error("finalize of model instance '%s' failed: %s", self.name, message["error"])
        stub.finalized.set()

    def close(self) -> None:
        """Finalize the model and end its stub (from a worker thread: blocking)."""
        self._closed = True
        stub = self.stub
        stub.closing = True
        loop = self.services.loop
        if stub.transport is not None and loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(_send_finalize, stub)
                stub.finalized.wait(self.settings.stub_timeout_seconds)
            except RuntimeError:  # the loop is gone (server exit)
                pass
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_close_transport, stub)
        self._kill(stub)


def _send_finalize(stub: Stub) -> None:
    try:
        stub.send({"op": "finalize"})
    except StubFailed:
        stub.finalized.set()


def _close_transport(stub: Stub) -> None:
    if stub.transport is not None:
        stub.transport.close()
