"""Prometheus metrics with Triton's family names, served on the metrics port at /metrics.

The per-model counters are rendered from the same statistics the statistics extension serves (stats.py), so
the two can never disagree. They are written by hand in the text exposition format because Triton's counters
carry no `_total` suffix, which prometheus-client would add.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from modelhost.http.protocol import HttpRequest, HttpResponse, error_response, start_http_server
from modelhost.python_backend.custom_metrics import CustomMetrics
from modelhost.stats import ModelStats

# (family, help, value of one model version); durations in microseconds, as Triton exports them.
_COUNTERS: list[tuple[str, str, Callable[[ModelStats], int]]] = [
    (
        "nv_inference_request_success",
        "Number of successful inference requests, all batch sizes",
        lambda s: s.success.count,
    ),
    (
        "nv_inference_count",
        "Number of inferences performed (does not include cached requests)",
        lambda s: s.inference_count,
    ),
    (
        "nv_inference_exec_count",
        "Number of model executions performed (does not include cached requests)",
        lambda s: s.execution_count,
    ),
    (
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds (includes cached requests)",
        lambda s: (s.success.ns + s.fail.ns) // 1000,
    ),
    (
        "nv_inference_queue_duration_us",
        "Cumulative inference queuing duration in microseconds",
        lambda s: s.queue.ns // 1000,
    ),
    (
        "nv_inference_compute_input_duration_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
        lambda s: s.compute_input.ns // 1000,
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
        lambda s: s.compute_infer.ns // 1000,
    ),
    (
        "nv_inference_compute_output_duration_us",
        "Cumulative inference compute output duration in microseconds (does not include cached requests)",
        lambda s: s.compute_output.ns // 1000,
    ),
]


_GAUGES: list[tuple[str, str, Callable[[ModelStats], float]]] = [
    (
        "nv_inference_pending_request_count",
        "Instantaneous number of pending requests awaiting execution per-model.",
        lambda s: s.pending(),
    ),
    ("nv_model_load_duration_secs", "Model load time in seconds", lambda s: round(s.load_duration_s, 6)),
]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(models: list[ModelStats], custom: CustomMetrics | None = None) -> bytes:
    lines = [
        "# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes",
        "# TYPE nv_inference_request_failure counter",
    ]
    labels = [f'model="{_escape(s.name)}",version="{_escape(s.version)}"' for s in models]
    for stats, label in zip(models, labels, strict=True):
        for reason, count in stats.failures.items():
            lines.append(f'nv_inference_request_failure{{{label},reason="{reason}"}} {count}')
    for name, help_text, value in _COUNTERS:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} counter")
        for stats, label in zip(models, labels, strict=True):
            lines.append(f"{name}{{{label}}} {value(stats)}")
    for name, help_text, gauge in _GAUGES:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} gauge")
        for stats, label in zip(models, labels, strict=True):
            lines.append(f"{name}{{{label}}} {gauge(stats)}")
    if custom is not None:
        lines.extend(custom.render())
    return ("\n".join(lines) + "\n").encode()


async def start_metrics_server(
    models: Callable[[], list[ModelStats]], host: str, port: int, custom: CustomMetrics | None = None
) -> asyncio.Server:
    """Serve /metrics; `models` gives the statistics of the versions to export at the time of the scrape."""

    async def handle(request: HttpRequest) -> HttpResponse:
        if request.path != "/metrics":
            return error_response(404, "Not Found")
        if request.method != "GET":
            return error_response(405, "Method Not Allowed")
        return HttpResponse(
            200, render(models(), custom), content_type="text/plain; charset=utf-8; version=0.0.4"
        )

    server, _ = await start_http_server(handle, host, port, max_body=1 << 16)
    return server
