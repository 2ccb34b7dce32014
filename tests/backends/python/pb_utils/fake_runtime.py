"""A stand-in for the stub's runtime (what pb_utils asks of the server), and requests and responses to try
pb_utils with."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import numpy as np

from modelhost.backends.python import pb_utils


class FakeRuntime:
    """Records what pb_utils asks of the stub; BLS answers are scripted."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, pb_utils.InferenceResponse | None, int]] = []
        self.cancelled: set[int] = set()
        self.logs: list[tuple[str, str, str, int]] = []
        self.families: list[tuple[str, str, str]] = []
        self.metrics: list[tuple[str, dict[str, str], list[float] | None]] = []
        self.updates: list[tuple[int, str, float]] = []
        self.values: dict[int, float] = {}
        self.controls: list[tuple[str, str, dict[str, Any]]] = []
        self.bls: list[tuple[pb_utils.InferenceRequest, bool, int]] = []
        self.bls_answer: Any = None
        self.fail_with: str | None = None

    def exec_bls(
        self, request: pb_utils.InferenceRequest, decoupled: bool, timeout_us: int
    ) -> pb_utils.InferenceResponse | pb_utils.ResponseIterator:
        self.bls.append((request, decoupled, timeout_us))
        return self.bls_answer  # type: ignore[no-any-return]

    def async_exec_bls(
        self, request: pb_utils.InferenceRequest, decoupled: bool
    ) -> Awaitable[pb_utils.InferenceResponse | AsyncIterator[pb_utils.InferenceResponse]]:
        self.bls.append((request, decoupled, 0))
        answer = self.bls_answer

        async def reply() -> Any:
            await asyncio.sleep(0)
            return answer

        return reply()

    def send_response(self, key: int, response: pb_utils.InferenceResponse | None, flags: int) -> None:
        self.sent.append((key, response, flags))

    def is_cancelled(self, key: int) -> bool:
        return key in self.cancelled

    def log(self, level: str, message: str, filename: str, line: int) -> None:
        self.logs.append((level, message, filename, line))

    def register_metric_family(self, name: str, description: str, kind: str) -> None:
        if self.fail_with:
            raise pb_utils.TritonModelException(self.fail_with)
        self.families.append((name, description, kind))

    def register_metric(self, family: str, labels: dict[str, str], buckets: list[float] | None) -> int:
        self.metrics.append((family, labels, buckets))
        return len(self.metrics)

    def update_metric(self, metric_id: int, op: str, value: float) -> None:
        if self.fail_with:
            raise pb_utils.TritonModelException(self.fail_with)
        self.updates.append((metric_id, op, value))
        self.values[metric_id] = self.values.get(metric_id, 0.0) + value if op != "set" else value

    def metric_value(self, metric_id: int) -> float:
        return self.values.get(metric_id, 0.0)

    def model_control(self, op: str, model_name: str, **kwargs: Any) -> Any:
        if self.fail_with:
            raise pb_utils.TritonModelException(self.fail_with)
        self.controls.append((op, model_name, kwargs))
        return True if op == "is_ready" else None


def server_request(
    key: int = 7, decoupled: bool = False, inputs: list[pb_utils.Tensor] | None = None
) -> pb_utils.InferenceRequest:
    return pb_utils.InferenceRequest._from_server(
        key=key,
        model_name="m",
        model_version=1,
        inputs=inputs or [],
        requested_output_names=["OUT"],
        request_id="r1",
        correlation_id=0,
        flags=0,
        timeout=0,
        parameters_json='{"p": 1}',
        decoupled=decoupled,
    )


def response(value: float = 1.0) -> pb_utils.InferenceResponse:
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value], dtype=np.float32))])
