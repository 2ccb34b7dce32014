"""The python stub's own cost per request, in process: a real `Stub` runs a batch of identity requests as the
server sends them (inputs in shared memory or in the message, the stub's output blocks freed by later messages,
as the server frees them), without the socket's round trip or a second process.

    .venv/bin/python benchmarks/stub_exchange.py --batch 8
    PYTHONPATH=/old/checkout/src .venv/bin/python benchmarks/stub_exchange.py --batch 8     (the old build)

It prints the best time per request of a few rounds (it moves with the machine's load) and the Python
bytecodes the stub runs per request (they do not), with the functions that run most. Both count the stub's
handling of the execute message only: not the server's side of this harness, nor the socket.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from typing import Any

import numpy as np
from bytecodes import BytecodeCount
from reference_repo import IDENTITY_PY

from modelhost.backends.python import pb_utils
from modelhost.backends.python.ipc import Arena, FrameReader, put_tensor
from modelhost.backends.python.pb_utils.runtime import set_runtime
from modelhost.backends.python.stub import Stub


class Exchange:
    """The server's side: execute messages for the stub, its replies read and their blocks handed back."""

    def __init__(self, batch: int) -> None:
        self.batch = batch
        self.server_end, stub_end = socket.socketpair()
        self.server_end.setblocking(False)
        self.stub = Stub(stub_end, f"mhbench_s{os.getpid()}_", 1 << 20, 1 << 20)
        sys.modules["triton_python_backend_utils"] = pb_utils
        set_runtime(self.stub.runtime)
        namespace: dict[str, Any] = {}
        exec(compile(IDENTITY_PY, "model.py", "exec"), namespace)
        runner = self.stub.runner
        runner.model = namespace["TritonPythonModel"]()
        runner.model_name = runner.instance_name = "identity"
        runner.initialized = True
        self.arena = Arena(f"mhbench_e{os.getpid()}_", 1 << 20, 1 << 20)
        self.reader = FrameReader()
        self.frees: list[tuple[str, int]] = []
        self.key = 0
        self.data = np.arange(16, dtype=np.float32).reshape(1, 16)

    def message(self) -> dict[str, Any]:
        requests = []
        for _ in range(self.batch):
            self.key += 1
            requests.append(
                {"key": self.key, "model_version": 1, "inputs": [put_tensor(self.arena, "INPUT0", self.data)],
                 "outputs": ["OUTPUT0"], "request_id": "", "correlation_id": 0, "flags": 0, "timeout": 0,
                 "parameters": "{}"}
            )  # fmt: skip
        message: dict[str, Any] = {"op": "execute", "id": self.key, "requests": requests}
        if self.frees:
            message["free"], self.frees = self.frees, []
        return message

    def run(self, count: BytecodeCount | None = None) -> float:
        """One execute: the stub's handling of it timed (and its bytecodes counted into `count`), then the
        reply read."""
        message = self.message()
        started = time.perf_counter()
        handle = self.stub.connection.handle  # what the stub's main loop calls for each message
        if count is None:
            handle(message)
        else:
            with count:
                handle(message)
        elapsed = time.perf_counter() - started
        try:
            while data := self.server_end.recv(1 << 20):
                for reply in self.reader.feed(data):
                    for segment, offset in reply.pop("free", ()):
                        self.arena.free(segment, offset)
                    for response in reply.get("responses") or ():
                        self.frees += [(o[3], o[4]) for o in response["outputs"] if isinstance(o[3], str)]
        except BlockingIOError:
            pass
        return elapsed

    def close(self) -> None:
        self.stub.connection.close()
        self.arena.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=8, help="requests per execute")
    parser.add_argument("--top", type=int, default=15, help="functions listed")
    args = parser.parse_args()
    exchange = Exchange(args.batch)
    try:
        for _ in range(200):  # warm up, and reach the steady state of the blocks in use
            exchange.run()
        best = min(sum(exchange.run() for _ in range(400)) / 400 / args.batch for _ in range(7))
        count = BytecodeCount()
        for _ in range(50):
            exchange.run(count)
        report = count.report(50 * args.batch, args.top)
        print(f"batch {args.batch}: {1e6 * best:.1f} us per request in the stub; {report}")
    finally:
        exchange.close()


if __name__ == "__main__":
    main()
