"""The stub process of one python model instance: imports the user's model.py and runs it for the server.

    python -m modelhost.backends.python.stub <socket fd> <shm prefix> <shm default bytes> <shm growth bytes>

Threads: the main thread reads the socket and runs the model (initialize, execute, finalize) one call at a time,
in the order the server sends them. A hand-off to a reader thread cost more than a small model's execute, so
there is none: whichever thread waits for a reply (a BLS result, a metric value; the main thread also for a
coroutine or `is_cancelled()`) reads the socket meanwhile, one at a time (connection.py), and hands the replies it
reads to their waiters. So a model's own threads get their BLS replies while its main thread is busy in the
model's code (joining those threads, as Triton's BLS qa model does). Calls the server sends (execute, ...) are
run by the main thread only. An event loop thread runs `async def execute` and `async_exec`. The process ends
when the server closes its end of the socket, or after finalize.

The parts: connection.py (the socket, its readers and waiters), model.py (the user's model: loading,
auto-complete, is_ready, finalize, calling its methods), execute.py (execute calls), bls.py (the model's BLS
requests), runtime.py (pb_utils' runtime seam), errors.py (a failure in Triton's words).
"""

from __future__ import annotations

import os
import socket
import sys

from modelhost.backends.python import pb_utils
from modelhost.backends.python.pb_utils.runtime import set_runtime
from modelhost.backends.python.stub.bls import BlsCalls
from modelhost.backends.python.stub.connection import Connection
from modelhost.backends.python.stub.execute import Executor
from modelhost.backends.python.stub.model import ModelRunner
from modelhost.backends.python.stub.runtime import StubRuntime


class Stub:
    """One stub's parts, wired: the server's calls go from the connection to the model runner or the executor; the
    runtime is what pb_utils calls."""

    def __init__(self, sock: socket.socket, prefix: str, default_size: int, growth: int) -> None:
        self.connection = Connection(sock, prefix, default_size, growth)
        self.runner = ModelRunner(self.connection)
        self.executor = Executor(self.connection, self.runner)
        self.runtime = StubRuntime(
            self.connection, self.runner, self.executor, BlsCalls(self.connection, self.runner)
        )
        self.connection.handlers.update(
            {
                "init": self.runner.on_init,
                "auto_complete": self.runner.on_auto_complete,
                "is_ready": self.runner.on_is_ready,
                "finalize": self.runner.on_finalize,
                "execute": self.executor.on_execute,
            }
        )


def main(argv: list[str]) -> int:
    fd, prefix, default_size, growth = int(argv[0]), argv[1], int(argv[2]), int(argv[3])
    # The model sees the argv of Triton's embedded interpreter, not the stub's own arguments (a model that runs
    # `unittest.main()`, as Triton's BLS qa models do, would take them for test names).
    sys.argv = [""]
    sock = socket.socket(fileno=fd)
    stub = Stub(sock, prefix, default_size, growth)
    sys.modules["triton_python_backend_utils"] = pb_utils
    set_runtime(stub.runtime)
    try:
        stub.connection.serve()
    finally:
        stub.connection.arena.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # threads of the model's own (and the reader) must not keep the process alive


__all__ = ["Stub", "main"]
