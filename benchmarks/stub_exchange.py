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
import collections
import os
import socket
import sys
import time
from types import FrameType
from typing import Any

import numpy as np

from modelhost.backends.python import pb_utils
from modelhost.backends.python.ipc import Arena, FrameReader, put_tensor
from modelhost.backends.python.stub import Stub

IDENTITY = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
"""


class Exchange:
    """The server's side: execute messages for the stub, its replies read and their blocks handed back."""

    def __init__(self, batch: int) -> None:
        self.batch = batch
        self.server_end, stub_end = socket.socketpair()
        self.server_end.setblocking(False)
        self.stub = Stub(stub_end, f"mhbench_s{os.getpid()}_", 1 << 20, 1 << 20)
        sys.modules["triton_python_backend_utils"] = pb_utils
        pb_utils._set_runtime(self.stub)
        namespace: dict[str, Any] = {}
        exec(compile(IDENTITY, "model.py", "exec"), namespace)
        self.stub.model = namespace["TritonPythonModel"]()
        self.stub.model_name = self.stub.instance_name = "identity"
        self.stub.initialized = True
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

    def run(self, tracer: Any = None) -> float:
        """One execute: the stub's handling of it timed (and traced with `tracer`), then the reply read."""
        message = self.message()
        if tracer is not None:
            sys.settrace(tracer)
        started = time.perf_counter()
        self.stub.handle(message)
        elapsed = time.perf_counter() - started
        sys.settrace(None)
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
        self.stub.arena.close()
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
        bytecodes: collections.Counter[str] = collections.Counter()

        def on_call(frame: FrameType, event: str, arg: object) -> Any:
            frame.f_trace_opcodes = True
            return on_opcode

        def on_opcode(frame: FrameType, event: str, arg: object) -> Any:
            if event == "opcode":
                code = frame.f_code
                bytecodes[f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}:{code.co_firstlineno}"] += 1
            return on_opcode

        for _ in range(50):
            exchange.run(on_call)
        n = 50 * args.batch
        print(
            f"batch {args.batch}: {1e6 * best:.1f} us per request in the stub; "
            f"{sum(bytecodes.values()) / n:.0f} bytecodes per request"
        )
        for name, count in bytecodes.most_common(args.top):
            print(f"  {count / n:7.1f}  {name}")
    finally:
        exchange.close()


if __name__ == "__main__":
    main()
