"""Prometheus metrics with Triton's family names, served on the metrics port at /metrics.

The per-model counters are rendered from the same statistics the statistics extension serves (stats.py), so
the two can never disagree. They are written by hand in the text exposition format because Triton's counters
carry no `_total` suffix, which prometheus-client would add.

What is exported follows `--metrics-config` (options/metrics.py): the latency counters (on by default), the
latency summaries and the first-response histogram of decoupled models (off by default); and
`--allow-cpu-metrics` / `--allow-gpu-metrics` (cpu_metrics.py, gpu_metrics.py). A model config's
`metric_tags` add a label `_<key>="<value>"` to every family of that model, as Triton does. Labels are written
in Triton's order, sorted by name, with a summary's `quantile` and a histogram's `le` last (`format_labels`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from modelhost.frontends.http.messages import HttpRequest, HttpResponse, error_response
from modelhost.frontends.http.protocol import start_http_server
from modelhost.observability.custom_metrics import CustomMetrics
from modelhost.observability.stats import FIRST_RESPONSE_HISTOGRAM, ModelStats, Summary, metrics_config
from modelhost.observability.stats import configure_metrics as configure_stats
from modelhost.options import ServerOptions
from modelhost.options.limits import HttpLimits
from modelhost.options.metrics import MetricsConfig, parse_metrics_config

log = logging.getLogger(__name__)


class ExportedModel(Protocol):
    """What the endpoint needs of a loaded model version (modelhost.engine.model.LoadedModel)."""

    @property
    def stats(self) -> ModelStats: ...

    @property
    def config(self) -> Any: ...

    @property
    def decoupled(self) -> bool: ...


class PolledMetrics(Protocol):
    """Server-wide gauges refreshed every --metrics-interval-ms (CPU, GPU)."""

    def render(self) -> list[str]: ...


# (family, help, value of one model version); durations in microseconds, as Triton exports them.
_COUNTS: list[tuple[str, str, Callable[[ModelStats], int]]] = [
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
]

# Only with counter_latencies=true (the default). Successful requests only, as Triton.
_LATENCY_COUNTERS: list[tuple[str, str, Callable[[ModelStats], int]]] = [
    (
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds (includes cached requests)",
        lambda s: s.success.ns // 1000,
    ),
    (
        "nv_inference_queue_duration_us",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
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

# Only with summary_latencies=true; Triton's help texts (the compute ones are those of the counters).
_SUMMARIES: list[tuple[str, str, str]] = [
    (
        "nv_inference_request_summary_us",
        "Summary of inference request duration in microseconds (includes cached requests)",
        "request",
    ),
    (
        "nv_inference_queue_summary_us",
        "Summary of inference queuing duration in microseconds (includes cached requests)",
        "queue",
    ),
    (
        "nv_inference_compute_input_summary_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
        "compute_input",
    ),
    (
        "nv_inference_compute_infer_summary_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
        "compute_infer",
    ),
    (
        "nv_inference_compute_output_summary_us",
        "Cumulative inference compute output duration in microseconds (does not include cached requests)",
        "compute_output",
    ),
]

# With summary_latencies=true, for models whose responses are cached; Triton's help texts.
_CACHE_SUMMARIES: list[tuple[str, str, str]] = [
    (
        "nv_cache_hit_summary_per_model",
        "Summary of cache hit counts/durations per model, in microseconds.",
        "cache_hit",
    ),
    (
        "nv_cache_miss_summary_per_model",
        "Summary of cache miss counts/durations per model, in microseconds.",
        "cache_miss",
    ),
]

# Only for models whose responses are cached (--cache-config and `response_cache { enable: true }`).
_CACHE_COUNTS: list[tuple[str, str, Callable[[ModelStats], int]]] = [
    ("nv_cache_num_hits_per_model", "Number of cache hits per model", lambda s: s.cache_hit.count),
    ("nv_cache_num_misses_per_model", "Number of cache misses per model", lambda s: s.cache_miss.count),
    (
        "nv_cache_hit_duration_per_model",
        "Total cache hit duration per model, in microseconds",
        lambda s: s.cache_hit.ns // 1000,
    ),
    (
        "nv_cache_miss_duration_per_model",
        "Total cache miss (insert + lookup) duration per model, in microseconds",
        lambda s: s.cache_miss.ns // 1000,
    ),
]

_GAUGES: list[tuple[str, str, Callable[[ModelStats], float]]] = [
    (
        "nv_inference_pending_request_count",
        "Instantaneous number of pending requests awaiting execution per-model.",
        lambda s: s.pending(),
    ),
    ("nv_model_load_duration_secs", "Model load time in seconds", lambda s: round(s.load_duration_s, 6)),
    (
        "nv_model_memory_bytes",
        "Host memory the model version took when it was loaded, in bytes (modelhost)",
        lambda s: s.memory_bytes,
    ),
]

_FIRST_RESPONSE_HELP = "Duration from request to first response in milliseconds"
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def family_names(
    config: MetricsConfig, *, cpu: bool = False, gpu: bool = False, cache: bool = False
) -> list[str]:
    """The families a server with this configuration can export (the time series of each family need a
    model, a decoupled one for the histogram, a GPU, or a cached model)."""
    from modelhost.observability.cpu_metrics import CPU_FAMILIES
    from modelhost.observability.gpu_metrics import GPU_FAMILIES
    from modelhost.observability.stats import CACHE_FAMILIES

    names = ["nv_inference_request_failure"] + [name for name, _, _ in _COUNTS]
    if config.counter_latencies:
        names += [name for name, _, _ in _LATENCY_COUNTERS]
    if config.summary_latencies:
        names += [name for name, _, _ in _SUMMARIES]
    if config.histogram_latencies:
        names.append(FIRST_RESPONSE_HISTOGRAM)
    names += [name for name, _, _ in _GAUGES]
    if cpu:
        names += CPU_FAMILIES
    if gpu:
        names += GPU_FAMILIES
    if cache:
        names += [name for name, _, _ in _CACHE_COUNTS] + [name for name, _ in CACHE_FAMILIES]
        if config.summary_latencies:
            names += [name for name, _, _ in _CACHE_SUMMARIES]
    return names


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def format_labels(labels: Mapping[str, str]) -> str:
    """A label set as the text format writes it between the braces, in Triton's order: prometheus-cpp keeps a
    metric's labels in a std::map and writes them in its order, sorted by name (`_tag`s, then `model`,
    `reason`, `version`). Scrapers that match lines as text (Triton's own qa tests among them) depend on it."""
    return ",".join(f'{key}="{_escape(value)}"' for key, value in sorted(labels.items()))


def model_label_set(name: str, version: str, config: Any = None) -> dict[str, str]:
    """`model` and `version`, plus Triton's `_<key>` per entry of the config's metric_tags (entries whose key
    makes no valid Prometheus label name are left out)."""
    labels = {"model": name, "version": version}
    tags = getattr(config, "metric_tags", None) if config is not None else None
    if tags:
        for key, value in tags.items():
            tag = f"_{key}"
            if _LABEL_NAME.fullmatch(tag) and not tag.startswith("__"):
                labels[tag] = value
    return labels


def model_labels(name: str, version: str, config: Any = None) -> str:
    """The labels of a model version's series, formatted (`_team="a",model="m",version="1"`)."""
    return format_labels(model_label_set(name, version, config))


def _summary_lines(name: str, label: str, summary: Summary, quantiles: Sequence[float]) -> list[str]:
    lines = [f"{name}_count{{{label}}} {summary.count}", f"{name}_sum{{{label}}} {_number(summary.sum)}"]
    for q, value in zip(quantiles, summary.window.quantiles(quantiles), strict=True):
        lines.append(f'{name}{{{label},quantile="{_number(q)}"}} {_number(value)}')
    return lines


def render(
    models: Sequence[ExportedModel | ModelStats],
    custom: CustomMetrics | None = None,
    polled: Sequence[PolledMetrics] = (),
    config: MetricsConfig | None = None,
) -> bytes:
    """The /metrics page. `models`: the loaded versions (plain statistics are enough without metric tags or
    histograms); `config`: the --metrics-config in force (by default the one given to stats.py)."""
    config = config or metrics_config()
    entries: list[tuple[ModelStats, str, Any, bool]] = []
    label_sets: list[dict[str, str]] = []
    for model in models:
        stats, model_config = (model, None) if isinstance(model, ModelStats) else (model.stats, model.config)
        label_sets.append(model_label_set(stats.name, stats.version, model_config))
        if stats.namespace:  # --model-namespacing, as Triton labels it
            label_sets[-1]["namespace"] = stats.namespace
        decoupled = False if isinstance(model, ModelStats) else model.decoupled
        entries.append((stats, format_labels(label_sets[-1]), model_config, decoupled))
    lines = [
        "# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes",
        "# TYPE nv_inference_request_failure counter",
    ]
    for (stats, _, _, _), label_set in zip(entries, label_sets, strict=True):
        for reason, count in stats.failures.items():
            failure_labels = format_labels({**label_set, "reason": reason})
            lines.append(f"nv_inference_request_failure{{{failure_labels}}} {count}")
    counters = _COUNTS + (_LATENCY_COUNTERS if config.counter_latencies else [])
    for name, help_text, value in counters:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} counter")
        for stats, label, _, _ in entries:
            lines.append(f"{name}{{{label}}} {value(stats)}")
    cached = [(stats, label) for stats, label, _, _ in entries if stats.cached]
    for name, help_text, value in _CACHE_COUNTS if cached else []:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} counter")
        lines.extend(f"{name}{{{label}}} {value(stats)}" for stats, label in cached)
    if config.summary_latencies:
        quantiles = [q for q, _ in config.summary_quantiles]
        for name, help_text, attribute in _SUMMARIES:
            # Triton publishes no request summary for a model whose responses are cached (its DLIS-4762).
            series = [
                (stats, label)
                for stats, label, _, _ in entries
                if stats.summaries is not None and not (attribute == "request" and stats.cached)
            ]
            if not series and attribute == "request" and entries:
                continue
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} summary")
            for stats, label in series:
                summary: Summary = getattr(stats.summaries, attribute)
                lines.extend(_summary_lines(name, label, summary, quantiles))
        for name, help_text, attribute in _CACHE_SUMMARIES if cached else []:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} summary")
            for stats, label in cached:
                if stats.summaries is not None:
                    lines.extend(_summary_lines(name, label, getattr(stats.summaries, attribute), quantiles))
    if config.histogram_latencies:
        lines.append(f"# HELP {FIRST_RESPONSE_HISTOGRAM} {_FIRST_RESPONSE_HELP}")
        lines.append(f"# TYPE {FIRST_RESPONSE_HISTOGRAM} histogram")
        for stats, label, model_config, decoupled in entries:
            histogram = stats.first_response_histogram(model_config) if decoupled else None
            if histogram is None:
                continue
            name = FIRST_RESPONSE_HISTOGRAM
            lines.append(f"{name}_count{{{label}}} {histogram.count}")
            lines.append(f"{name}_sum{{{label}}} {_number(histogram.sum)}")
            for bound, count in zip(histogram.bounds, histogram.cumulative(), strict=True):
                lines.append(f'{name}_bucket{{{label},le="{_number(bound)}"}} {count}')
            lines.append(f'{name}_bucket{{{label},le="+Inf"}} {histogram.count}')
    for name, help_text, gauge in _GAUGES:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} gauge")
        for stats, label, _, _ in entries:
            lines.append(f"{name}{{{label}}} {_number(gauge(stats))}")
    for source in polled:
        lines.extend(source.render())
    if custom is not None:
        lines.extend(custom.render())
    return ("\n".join(lines) + "\n").encode()


async def start_metrics_server(
    models: Callable[[], Sequence[ExportedModel | ModelStats]],
    host: str,
    port: int,
    custom: CustomMetrics | None = None,
    polled: Sequence[PolledMetrics] = (),
) -> asyncio.Server:
    """Serve /metrics; `models` gives the versions to export at the time of the scrape."""

    async def handle(request: HttpRequest) -> HttpResponse:
        if request.path != "/metrics":
            return error_response(404, "Not Found")
        if request.method != "GET":
            return error_response(405, "Method Not Allowed")
        return HttpResponse(
            200, render(models(), custom, polled), content_type="text/plain; charset=utf-8; version=0.0.4"
        )

    server, _ = await start_http_server(handle, host, port, HttpLimits(max_body=1 << 16))
    return server


def configure_metrics(options: ServerOptions) -> MetricsConfig:
    """Apply --metrics-config (checked by ServerOptions) before the first model loads; with --allow-metrics
    false no latency summary or histogram is kept."""
    config = parse_metrics_config(options.metrics_config)
    if not options.allow_metrics:
        config = MetricsConfig(counter_latencies=config.counter_latencies)
    configure_stats(config)
    return config


def start_polled_metrics(options: ServerOptions) -> tuple[list[PolledMetrics], list[asyncio.Task[None]]]:
    """The CPU and GPU families asked for, and the tasks refreshing them every --metrics-interval-ms (to
    cancel at shutdown)."""
    from modelhost.observability import cpu_metrics, gpu_metrics

    polled: list[PolledMetrics] = []
    tasks: list[asyncio.Task[None]] = []
    interval = options.metrics_interval_ms
    if options.allow_cpu_metrics:
        cpu = cpu_metrics.start_cpu_metrics()
        if cpu is not None:
            log.info("Collecting CPU metrics")  # Triton's line
            polled.append(cpu)
            tasks.append(asyncio.create_task(cpu_metrics.poll_forever(cpu, interval)))
    if options.allow_gpu_metrics:
        gpu = gpu_metrics.start_gpu_metrics()
        if gpu is not None:
            polled.append(gpu)
            tasks.append(asyncio.create_task(gpu_metrics.poll_forever(gpu, interval)))
    return polled, tasks
