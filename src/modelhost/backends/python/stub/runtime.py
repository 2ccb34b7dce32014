"""The stub's side of pb_utils' runtime seam (pb_utils.Runtime): what a model asks of the server from its own
code. Responses its senders send (a default-mode model's wait for the execute's reply; a decoupled model's go at
once), cancellation, BLS (bls.py), logs, trace activities, custom metrics and model control."""

from __future__ import annotations

import sys
from collections.abc import Awaitable
from typing import Any

from modelhost.backends.python import pb_utils
from modelhost.backends.python.stub.bls import BlsCalls
from modelhost.backends.python.stub.connection import Connection
from modelhost.backends.python.stub.execute import FINAL, Executor
from modelhost.backends.python.stub.model import ModelRunner


class StubRuntime:
    def __init__(self, connection: Connection, runner: ModelRunner, executor: Executor, bls: BlsCalls) -> None:
        self.connection = connection
        self.runner = runner
        self.executor = executor
        self.bls = bls

    def send_response(self, key: int, response: pb_utils.InferenceResponse | None, flags: int) -> None:
        executor = self.executor
        described = None if response is None else executor.describe(response)
        if not self.runner.decoupled:
            sent = executor.sent
            if described is not None or key not in sent:  # send(resp) then send(flags=FINAL): keep resp
                sent[key] = described
            return
        self.connection.channel_send({"op": "response", "key": key, "response": described, "flags": flags})
        if flags & FINAL:
            self.connection.release_inputs(key)

    def is_cancelled(self, key: int) -> bool:
        cancelled = self.connection.cancelled
        if key not in cancelled:
            # Read a cancellation that came meanwhile, unless another thread is reading (it routes it).
            self.connection.wait_until(lambda: key in cancelled, timeout=0)
        return key in cancelled

    def exec_bls(self, request: pb_utils.InferenceRequest, decoupled: bool, timeout_us: int) -> Any:
        return self.bls.exec_bls(request, decoupled, timeout_us)

    def async_exec_bls(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Awaitable[Any]:
        return self.bls.async_exec_bls(request, decoupled)

    def log(self, level: str, message: str, filename: str, line: int) -> None:
        if self.connection.in_forked_process():
            # A forked process: its own stderr (the server's log) rather than an error.
            print(f"{level} {filename}:{line}] {message}", file=sys.stderr, flush=True)
            return
        self.connection.channel_send(
            {"op": "log", "level": level, "message": message, "file": filename, "line": line}
        )

    def trace_activity(self, trace_id: int, name: str, ns: int) -> None:
        self.connection.channel_send({"op": "trace_activity", "trace": trace_id, "name": name, "ns": ns})

    def register_metric_family(self, name: str, description: str, kind: str) -> None:
        self.connection.channel_send(
            {"op": "metric_family", "name": name, "description": description, "kind": kind}
        )

    def register_metric(self, family: str, labels: dict[str, str], buckets: list[float] | None) -> int:
        metric_id = self.connection.next_id()
        self.connection.channel_send(
            {"op": "metric", "metric": metric_id, "family": family, "labels": labels, "buckets": buckets}
        )
        return metric_id

    def update_metric(self, metric_id: int, op: str, value: float) -> None:
        self.connection.channel_send({"op": "metric_update", "metric": metric_id, "update": op, "value": value})

    def metric_value(self, metric_id: int) -> float:
        return float(self.connection.request({"op": "metric_value", "metric": metric_id})["value"])

    def model_control(self, op: str, model_name: str, **kwargs: Any) -> Any:
        reply = self.connection.request({"op": "control", "control": op, "model": model_name, "kwargs": kwargs})
        if reply.get("error"):
            raise pb_utils.TritonModelException(reply["error"])
        return reply.get("result")
