"""A python model's stub process: spawned with its socket and its shared-memory prefix, its settings
(--backend-config=python,...), the blocking exchanges of its start (before the event loop takes its socket), and
the socket on the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from modelhost.backends.api import ResponseSink
from modelhost.backends.python import ipc
from modelhost.backends.python.environments import (
    SERVER_PYTHON,
    EnvironmentSettings,
    PythonEnvironment,
    stub_variables,
)
from modelhost.backends.python.ipc import Arena, FrameReader, SegmentMap
from modelhost.errors import InternalError, OutOfMemory

log = logging.getLogger("modelhost.python")


@dataclass(frozen=True, slots=True)
class StubSettings:
    """--backend-config=python,... settings (Triton's names and defaults)."""

    shm_default_byte_size: int = 1 << 20
    shm_growth_byte_size: int = 1 << 20
    stub_timeout_seconds: int = 30
    shm_region_prefix_name: str = "modelhost_python_"
    # Where models' own environments are built and what they install from (environments.py; ours).
    environments: EnvironmentSettings = field(
        default_factory=lambda: EnvironmentSettings.from_backend_config({})
    )

    @classmethod
    def from_backend_config(cls, config: dict[str, str]) -> StubSettings:
        return cls(
            shm_default_byte_size=int(config.get("shm-default-byte-size", 1 << 20)),
            shm_growth_byte_size=int(config.get("shm-growth-byte-size", 1 << 20)),
            stub_timeout_seconds=int(config.get("stub-timeout-seconds", 30)),
            shm_region_prefix_name=config.get("shm-region-prefix-name", "modelhost_python_"),
            environments=EnvironmentSettings.from_backend_config(config),
        )


class StubFailed(InternalError):
    pass


@dataclass(slots=True, frozen=True)
class SentBatch:
    """A batch sent to a stub: `on_reply` takes its answer; `resend` hands its jobs to the next stub when this one
    dies before it began the batch."""

    on_reply: Callable[[dict[str, Any]], None]
    resend: Callable[[], None]


@dataclass(slots=True)
class Stub:
    """One stub process and the memory and messages that live and die with it."""

    number: int  # unique in this server: names its shared memory and its metrics
    instance_name: str  # the model instance it runs
    prefix: str  # of its shared-memory files
    process: subprocess.Popen[bytes]
    sock: socket.socket
    arena: Arena
    segments: SegmentMap = field(default_factory=SegmentMap)
    transport: asyncio.Transport | None = None
    # Blocks of the stub's arena we are done with, sent back with our next message.
    frees: list[tuple[str, int]] = field(default_factory=list)
    # Batches sent and not yet answered, in the order sent: the stub runs them one at a time in that order.
    executing: dict[int, SentBatch] = field(default_factory=dict)
    sinks: dict[int, ResponseSink] = field(default_factory=dict)
    # The model's BLS and model-control calls being served, by the id of their message.
    tasks: dict[int, asyncio.Task[None]] = field(default_factory=dict)
    finalized: threading.Event = field(default_factory=threading.Event)
    closing: bool = False
    # Killed by us for a request timeout, whose batch was answered then: every batch left had not begun.
    killed_after_answer: bool = False

    def send(self, message: dict[str, Any]) -> None:
        """A message to the stub, on the event loop, with the free list of its blocks we are done with."""
        if self.frees:
            message["free"], self.frees = self.frees, []
        transport = self.transport
        if transport is None or transport.is_closing():
            raise StubFailed(f"the stub process of model instance '{self.instance_name}' is not running")
        transport.write(ipc.encode(message))


class StubProtocol(asyncio.Protocol):
    """A stub's socket on the event loop: each message to `on_message`, the end of the connection to `on_lost`."""

    def __init__(
        self, stub: Stub, on_message: Callable[[Stub, dict[str, Any]], None], on_lost: Callable[[Stub], None]
    ) -> None:
        self.stub = stub
        self.on_message = on_message
        self.on_lost = on_lost
        self.reader = FrameReader()

    def data_received(self, data: bytes) -> None:
        for message in self.reader.feed(data):
            self.on_message(self.stub, message)

    def connection_lost(self, exc: Exception | None) -> None:
        self.on_lost(self.stub)


stub_numbers = itertools.count(1)
_swept: set[str] = set()
# Blocks of a stub's memory we are done with, sent back with our next message; past this many, at once.
FREES_PER_MESSAGE = 64


def spawn_stub(
    settings: StubSettings, stub_id: int, environment: PythonEnvironment = SERVER_PYTHON
) -> tuple[subprocess.Popen[bytes], socket.socket, str]:
    """A new stub process under `environment`'s Python, the server's end of its socket, and the name prefix of
    its shared memory."""
    # Once per prefix: the shared memory a killed server with that prefix left in /dev/shm.
    if settings.shm_region_prefix_name not in _swept:
        _swept.add(settings.shm_region_prefix_name)
        removed = ipc.sweep_stale_segments(settings.shm_region_prefix_name)
        if removed:
            log.info("removed %d shared memory segments left by a server that is gone", len(removed))
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    prefix = f"{settings.shm_region_prefix_name}{os.getpid()}_{stub_id}_"
    command = [
        environment.python,
        "-m",
        "modelhost.backends.python.stub",
        str(child.fileno()),
        prefix + "s_",
        str(settings.shm_default_byte_size),
        str(settings.shm_growth_byte_size),
    ]
    try:
        # Its own session: a Ctrl-C or a SIGTERM to the server's process group is the server's to handle; the
        # server then finalizes the model and ends the stub.
        process = subprocess.Popen(
            command,
            pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=stub_variables(environment),
        )
    except BaseException:
        parent.close()
        raise
    finally:
        child.close()
    return process, parent, prefix


def exchange(
    sock: socket.socket,
    process: subprocess.Popen[bytes],
    message: dict[str, Any],
    answer: str,
    timeout_s: float,
    what: str,
    on_other: Callable[[dict[str, Any]], None] | None = None,
    unbounded_after: str | None = None,
) -> dict[str, Any]:
    """Send a message and wait for the `answer` op with blocking I/O (before the socket goes to the event
    loop); what else the model says meanwhile (its logs) goes to `on_other`. Once the `unbounded_after` op
    arrives, the wait has no deadline (the process exiting still ends it)."""
    sock.settimeout(timeout_s)
    reader = FrameReader()
    deadline: float | None = time.monotonic() + timeout_s
    try:
        sock.sendall(ipc.encode(message))
        while True:
            data = sock.recv(1 << 16)
            if not data:
                code = process.wait()
                if code == -signal.SIGKILL:  # what the kernel's OOM killer sends
                    raise OutOfMemory(
                        f"the stub process of {what} was killed (SIGKILL) before answering, most likely by the "
                        "kernel's OOM killer: out of memory"
                    )
                raise StubFailed(f"the stub process of {what} exited with code {code} before answering")
            for reply in reader.feed(data):
                if reply["op"] == answer:
                    return reply
                if reply["op"] == unbounded_after:
                    deadline = None
                    sock.settimeout(None)
                elif on_other is not None:
                    on_other(reply)
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError
    except TimeoutError:
        raise StubFailed(
            f"the stub process of {what} did not answer within {timeout_s:g} s "
            "(--backend-config=python,stub-timeout-seconds)"
        ) from None
    except OSError as e:
        raise StubFailed(f"the stub process of {what} could not be reached: {e}") from e
    finally:
        with contextlib.suppress(OSError):
            sock.settimeout(None)
