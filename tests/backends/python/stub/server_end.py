"""The server's end of a stub's socket, in process: a `Stub` over one end of a socketpair, its messages read back
from the other (small tensors travel inside the messages, so no arena is needed on this side)."""

from __future__ import annotations

import itertools
import os
import socket
import sys
from typing import Any

import numpy as np
import numpy.typing as npt

from modelhost.backends.python import pb_utils
from modelhost.backends.python.ipc import (
    Arena,
    FrameReader,
    SegmentMap,
    as_refs,
    encode,
    put_tensor,
    read_tensor,
)
from modelhost.backends.python.pb_utils.runtime import set_runtime
from modelhost.backends.python.stub import Stub

_numbers = itertools.count(1)


class ServerEnd:
    def __init__(self, model: Any, decoupled: bool = False) -> None:
        self.sock, stub_end = socket.socketpair()
        self.sock.settimeout(10)
        prefix = f"mhtest_{os.getpid()}_{next(_numbers)}_"
        self.stub = Stub(stub_end, prefix + "s_", 1 << 16, 1 << 16)
        self.arena = Arena(prefix + "p_", 1 << 16, 1 << 16)
        self.segments = SegmentMap()
        self.reader = FrameReader()
        self.pending: list[dict[str, Any]] = []
        runner = self.stub.runner
        runner.model = model
        runner.model_name = runner.instance_name = "m"
        runner.decoupled = decoupled
        runner.initialized = True
        sys.modules["triton_python_backend_utils"] = pb_utils
        set_runtime(self.stub.runtime)

    def execute(self, *inputs: npt.NDArray[Any], key: int = 1) -> None:
        """An execute call of one request per input array (keys from `key` on), run by the stub at once."""
        requests = [
            {
                "key": key + i,
                "model_version": 1,
                "inputs": [put_tensor(self.arena, "INPUT0", array)],
                "outputs": ["OUTPUT0"],
                "request_id": "",
                "correlation_id": 0,
                "flags": 0,
                "timeout": 0,
                "parameters": "{}",
            }
            for i, array in enumerate(inputs)
        ]
        self.stub.connection.handle({"op": "execute", "id": 100 + key, "requests": requests})

    def next_message(self) -> dict[str, Any]:
        while not self.pending:
            self.pending.extend(self.reader.feed(self.sock.recv(1 << 16)))
        return self.pending.pop(0)

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(encode(message))

    def outputs(self, described: dict[str, Any]) -> dict[str, npt.NDArray[Any]]:
        return {ref.name: read_tensor(self.segments, ref) for ref in as_refs(described["outputs"])}

    def close(self) -> None:
        set_runtime(None)
        self.sock.close()
        self.stub.connection.close()
        self.arena.close()
        self.segments.close()


class Identity:
    def execute(self, requests: list[pb_utils.InferenceRequest]) -> list[pb_utils.InferenceResponse]:
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]  # type: ignore[union-attr]
            )
            for r in requests
        ]


def floats(*values: float) -> npt.NDArray[Any]:
    return np.array([values], dtype=np.float32)
