"""Prometheus metrics with Triton's family names, served on the metrics port at /metrics.

So far the per-model request counters (the rest of Triton's families come with the observability work). They
are rendered by hand in the text exposition format because Triton's counters carry no `_total` suffix, which
prometheus-client would add. Counters are plain integers updated on the event loop thread only.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from modelhost.http.protocol import HttpRequest, HttpResponse, error_response, start_http_server

_FAMILIES = (
    ("nv_inference_request_success", "Number of successful inference requests, all batch sizes"),
    ("nv_inference_request_failure", "Number of failed inference requests, all batch sizes"),
    ("nv_inference_count", "Number of inferences performed (does not include cached requests)"),
    ("nv_inference_exec_count", "Number of model executions performed (does not include cached requests)"),
    ("nv_inference_request_duration_us", "Cumulative inference request duration in microseconds"),
)
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


@dataclass(slots=True)
class ModelMetrics:
    """The counters of one model version."""

    model: str
    version: str
    success: int = 0
    inferences: int = 0
    executions: int = 0
    duration_us: int = 0
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0))

    def succeeded(self, batch_size: int, duration_ns: int) -> None:
        self.success += 1
        self.inferences += batch_size
        self.executions += 1
        self.duration_us += duration_ns // 1000

    def failed(self, reason: str, duration_ns: int) -> None:
        self.failures[reason] += 1
        self.duration_us += duration_ns // 1000


class Metrics:
    def __init__(self) -> None:
        self.models: dict[tuple[str, str], ModelMetrics] = {}

    def for_model(self, model: str, version: str) -> ModelMetrics:
        key = (model, version)
        found = self.models.get(key)
        if found is None:
            found = self.models[key] = ModelMetrics(model, version)
        return found

    def render(self) -> bytes:
        lines: list[str] = []
        rows = sorted(self.models.values(), key=lambda m: (m.model, m.version))
        for name, help_text in _FAMILIES:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} counter")
            for m in rows:
                labels = f'model="{_escape(m.model)}",version="{_escape(m.version)}"'
                if name == "nv_inference_request_failure":
                    for reason, count in m.failures.items():
                        lines.append(f'{name}{{{labels},reason="{reason}"}} {count}')
                    continue
                value = {
                    "nv_inference_request_success": m.success,
                    "nv_inference_count": m.inferences,
                    "nv_inference_exec_count": m.executions,
                    "nv_inference_request_duration_us": m.duration_us,
                }[name]
                lines.append(f"{name}{{{labels}}} {value}")
        return ("\n".join(lines) + "\n").encode()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


async def start_metrics_server(metrics: Metrics, host: str, port: int) -> asyncio.Server:
    async def handle(request: HttpRequest) -> HttpResponse:
        if request.path != "/metrics":
            return error_response(404, "Not Found")
        if request.method != "GET":
            return error_response(405, "Method Not Allowed")
        return HttpResponse(200, metrics.render(), content_type="text/plain; charset=utf-8; version=0.0.4")

    server, _ = await start_http_server(handle, host, port, max_body=1 << 16)
    return server
