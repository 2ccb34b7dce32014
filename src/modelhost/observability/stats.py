"""Per model version statistics, kept as Triton keeps them, for the statistics extension and /metrics.

Counts and durations are plain integers updated on the event loop thread only. `inference_count` counts batch
rows and `execution_count` model executions; the request durations (success, fail, queue, compute_*) are per
request, and `batch_stats` per execution, keyed by the batch size that ran. `response_stats` are per response
index of a decoupled model's requests ("0" the first response of each request, "1" the second, ...).

The latency summaries and the first-response histogram of the metrics endpoint (`--metrics-config
summary_latencies=true` / `histogram_latencies=true`) are kept here too, only when they are turned on:
`configure_metrics` is called once at startup, before any model loads.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from modelhost.options.metrics import MetricsConfig, Quantiles

# The response cache's families (--cache-config): what the local cache reports, in Triton's names.
CACHE_FAMILIES: tuple[tuple[str, str], ...] = (
    ("nv_cache_util", "Cache utilization [0.0 - 1.0]"),
    ("nv_cache_num_entries", "Number of responses stored in response cache"),
    ("nv_cache_num_lookups", "Number of cache lookups in response cache"),
    ("nv_cache_num_hits", "Number of cache hits in response cache"),
    ("nv_cache_num_misses", "Number of cache misses in response cache"),
    ("nv_cache_num_evictions", "Number of cache evictions in response cache"),
    ("nv_cache_lookup_duration", "Total cache lookup duration (hit and miss), in microseconds"),
    ("nv_cache_insertion_duration", "Total cache insertion duration, in microseconds"),
)


FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
FIRST_RESPONSE_HISTOGRAM = "nv_inference_first_response_histogram_ms"
DEFAULT_FIRST_RESPONSE_BUCKETS = (100.0, 500.0, 2000.0, 5000.0)  # ms, as Triton

_config = MetricsConfig()


def configure_metrics(config: MetricsConfig) -> None:
    """The --metrics-config of this process; statistics created afterwards follow it."""
    global _config
    _config = config


def metrics_config() -> MetricsConfig:
    return _config


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def to_json(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


# Quarter-octave latency buckets: 4 per power of two from 4 ns up, the last one open (about 18 minutes on).
_LATENCY_BUCKETS = 156


def latency_bucket_upper_ns(index: int) -> int:
    """The exclusive upper bound of latency bucket `index` (see LatencyHistogram)."""
    octave, step = divmod(index, 4)
    return (5 + step) << octave


class LatencyHistogram:
    """Successful requests by latency, since the version loaded: what the console's p50 and p99 are read from
    (the `latency_histogram` of the statistics JSON, modelhost's addition).

    Buckets are a quarter of an octave wide (a bound at most 25% above the latencies it holds), found from the
    bit length of the nanoseconds: a few integer operations and one increment per request, no search, so it is
    kept for every model whatever --metrics-config says (the summaries it sets cost far more)."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts = [0] * _LATENCY_BUCKETS

    def add(self, ns: int) -> None:
        bits = ns.bit_length()
        if bits < 3:
            self.counts[0] += 1
            return
        index = ((bits - 3) << 2) | ((ns >> (bits - 3)) & 3)
        self.counts[index if index < _LATENCY_BUCKETS else _LATENCY_BUCKETS - 1] += 1

    def to_json(self) -> dict[str, Any]:
        """`{"unit": "ns", "buckets": [[upper bound, count], ...]}`, the empty buckets left out."""
        return {
            "unit": "ns",
            "buckets": [[latency_bucket_upper_ns(i), n] for i, n in enumerate(self.counts) if n],
        }


@dataclass(slots=True)
class BatchStats:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass(slots=True)
class ResponseStats:
    """One response index of a decoupled model (Triton's InferResponseStats)."""

    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    empty_response: Duration = field(default_factory=Duration)
    cancel: Duration = field(default_factory=Duration)

    def to_json(self) -> dict[str, dict[str, int]]:
        return {
            "compute_infer": self.compute_infer.to_json(),
            "compute_output": self.compute_output.to_json(),
            "success": self.success.to_json(),
            "fail": self.fail.to_json(),
            "empty_response": self.empty_response.to_json(),
            "cancel": self.cancel.to_json(),
        }


@dataclass(slots=True)
class RequestTiming:
    """What one request spent where, filled in as it goes through the model and its scheduler."""

    queue_ns: int = 0
    input_ns: int = 0
    infer_ns: int = 0
    output_ns: int = 0
    # preserve_ordering: how long the finished answer waited for the answers of requests that came before it.
    held_ns: int = 0


class WindowedQuantiles:
    """Quantiles of the values observed over the last `max_age_s` seconds, in bounded memory.

    The window is the one of Triton's summaries (prometheus-cpp's TimeWindowQuantiles: 60 s in 5 age buckets,
    the oldest bucket dropped every 12 s), but each age bucket is a log-bucketed sketch (DDSketch) rather than
    CKMS: a value v counts in bin ceil(log(v) / log(gamma)), gamma = (1 + a) / (1 - a), so an estimate is
    within a relative error `a` of a value of the right rank. Observing is one log and one dict increment (no
    sort, no compression pass on the request path), and memory is at most one bin per factor gamma between
    the smallest and the largest value seen (~2000 bins from 1 us to 100 s at a = 0.005), per age bucket.
    The error of `summary_quantiles` (a rank error for CKMS) is accepted and not used: the relative error
    here is `RELATIVE_ACCURACY` for every quantile.
    """

    RELATIVE_ACCURACY = 0.005
    __slots__ = (
        "_bins",
        "_inv_log_gamma",
        "_next_rotation",
        "_rotate_s",
        "_windows",
        "_windows_max",
        "_zeros",
    )

    def __init__(self, max_age_s: float = 60.0, age_buckets: int = 5) -> None:
        gamma = (1 + self.RELATIVE_ACCURACY) / (1 - self.RELATIVE_ACCURACY)
        self._inv_log_gamma = 1.0 / math.log(gamma)
        self._rotate_s = max_age_s / age_buckets
        self._next_rotation = time.monotonic() + self._rotate_s
        # (bins, zeros) per age bucket, newest last; the newest is the one observed into.
        self._windows: list[tuple[dict[int, int], list[int]]] = [({}, [0])]
        self._bins, self._zeros = self._windows[-1]
        self._windows_max = age_buckets

    def observe(self, value: float, now: float) -> None:
        if now >= self._next_rotation:
            self._rotate(now)
        if value > 0:
            key = math.ceil(math.log(value) * self._inv_log_gamma)
            bins = self._bins
            bins[key] = bins.get(key, 0) + 1
        else:
            self._zeros[0] += 1

    def _rotate(self, now: float) -> None:
        # Age buckets that ended while nothing was observed are empty: skip them, at most a window's worth.
        steps = int((now - self._next_rotation) / self._rotate_s) + 1
        for _ in range(min(steps, self._windows_max)):
            self._windows.append(({}, [0]))
        del self._windows[: -self._windows_max]
        self._next_rotation += steps * self._rotate_s
        self._bins, self._zeros = self._windows[-1]

    def quantiles(self, qs: Sequence[float], now: float | None = None) -> list[float]:
        """The estimate of each quantile in `qs`; NaN with nothing observed in the window (as prometheus-cpp)."""
        if now is None:
            now = time.monotonic()
        if now >= self._next_rotation:
            self._rotate(now)
        merged: dict[int, int] = {}
        zeros = 0
        for bins, zero in self._windows:
            zeros += zero[0]
            for key, count in bins.items():
                merged[key] = merged.get(key, 0) + count
        total = zeros + sum(merged.values())
        if total == 0:
            return [math.nan for _ in qs]
        ordered = sorted(merged.items())
        gamma = math.exp(1.0 / self._inv_log_gamma)
        results: list[float] = []
        for q in qs:
            rank = q * (total - 1)
            if rank < zeros:
                results.append(0.0)
                continue
            seen = zeros
            value = 0.0
            for key, count in ordered:
                seen += count
                if seen > rank:
                    # The middle of bin (gamma^(k-1), gamma^k], in relative terms.
                    value = 2.0 * gamma**key / (gamma + 1.0)
                    break
            results.append(value)
        return results


class Summary:
    """A Prometheus summary: exact count and sum since start, windowed quantiles."""

    __slots__ = ("count", "sum", "window")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self.window = WindowedQuantiles()

    def observe(self, value: float, now: float) -> None:
        self.count += 1
        self.sum += value
        self.window.observe(value, now)


class LatencySummaries:
    """The latency summaries of one model version, in microseconds (nv_inference_*_summary_us, and the cache
    hit and miss durations)."""

    __slots__ = (
        "cache_hit",
        "cache_miss",
        "compute_infer",
        "compute_input",
        "compute_output",
        "quantiles",
        "queue",
        "request",
    )

    def __init__(self, quantiles: Quantiles) -> None:
        self.quantiles = quantiles
        self.request = Summary()
        self.queue = Summary()
        self.compute_input = Summary()
        self.compute_infer = Summary()
        self.compute_output = Summary()
        # nv_cache_{hit,miss}_summary_per_model, for a model whose responses are cached.
        self.cache_hit = Summary()
        self.cache_miss = Summary()

    def observe(self, total_ns: int, timing: RequestTiming) -> None:
        # Whole microseconds, as Triton observes them (ns / 1000 in integers).
        now = time.monotonic()
        self.request.observe(total_ns // 1000, now)
        self.queue.observe(timing.queue_ns // 1000, now)
        self.compute_input.observe(timing.input_ns // 1000, now)
        self.compute_infer.observe(timing.infer_ns // 1000, now)
        self.compute_output.observe(timing.output_ns // 1000, now)


class Histogram:
    """A Prometheus histogram with fixed bucket bounds (`le`), +Inf implied."""

    __slots__ = ("bounds", "buckets", "count", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.buckets = [0] * len(self.bounds)  # not cumulative; the +Inf bucket is `count`
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.count += 1
        self.sum += value
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.buckets[i] += 1
                break

    def cumulative(self) -> list[int]:
        out: list[int] = []
        running = 0
        for count in self.buckets:
            running += count
            out.append(running)
        return out


def first_response_buckets(config: Any) -> tuple[float, ...]:
    """The buckets of nv_inference_first_response_histogram_ms: the model config's `model_metrics` override
    (`metric_control { metric_identifier { family } histogram_options { buckets } }`), else Triton's."""
    buckets: tuple[float, ...] = DEFAULT_FIRST_RESPONSE_BUCKETS
    for control in config.model_metrics.metric_control:
        if control.metric_identifier.family == FIRST_RESPONSE_HISTOGRAM:
            buckets = tuple(float(b) for b in control.histogram_options.buckets)
    return tuple(sorted(set(buckets)))


class ResponseClock:
    """Times the responses of one decoupled request, for `response_stats` and the first-response histogram.

    `arrived()` when the model hands a response over, `done(kind)` once it is ready to send (kind: "success",
    "fail" or "empty_response"). A response's compute_infer is the time from the previous response (or the
    request's start) to its arrival, its compute_output the time from there to `done`.
    """

    __slots__ = ("_arrived", "_histogram", "_index", "_mark", "_started", "_stats")

    def __init__(self, stats: ModelStats, histogram: Histogram | None) -> None:
        self._stats = stats
        self._histogram = histogram
        self._started = self._mark = self._arrived = time.perf_counter_ns()
        self._index = 0

    def arrived(self) -> None:
        self._arrived = time.perf_counter_ns()

    def done(self, kind: str) -> None:
        now = time.perf_counter_ns()
        index = self._index
        stats = self._stats.responses.get(index)
        if stats is None:
            stats = self._stats.responses[index] = ResponseStats()
        infer_ns = max(0, self._arrived - self._mark)
        if kind == "success":
            stats.compute_infer.add(infer_ns)
            stats.compute_output.add(now - self._arrived)
            stats.success.add(now - self._mark)
        elif kind == "fail":
            stats.compute_infer.add(now - self._mark)
            stats.fail.add(now - self._mark)
        else:
            stats.compute_infer.add(now - self._mark)
            stats.empty_response.add(now - self._mark)
        if index == 0 and self._histogram is not None and kind != "empty_response":
            self._histogram.observe((now - self._started) / 1e6)
        self._index = index + 1
        self._mark = now


@dataclass(slots=True)
class ModelStats:
    name: str
    version: str
    last_inference_ms: int = 0
    inference_count: int = 0
    execution_count: int = 0
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    # The response cache: requests answered from it (lookup time), and those it missed (lookup + insertion).
    cache_hit: Duration = field(default_factory=Duration)
    cache_miss: Duration = field(default_factory=Duration)
    cached: bool = False  # the model's responses are cached (its cache families are exported)
    # --model-namespacing: the repository the model comes from, a label of its metrics ("" without namespacing).
    namespace: str = ""
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0))
    batches: dict[int, BatchStats] = field(default_factory=dict)
    responses: dict[int, ResponseStats] = field(default_factory=dict)
    # Set by the model: requests queued and not yet executing (nv_inference_pending_request_count).
    pending: Callable[[], int] = lambda: 0
    load_duration_s: float = 0.0
    # What this version took in memory when it was built (model_memory.py): host bytes, bytes per GPU.
    memory_bytes: int = 0
    gpu_memory_bytes: dict[int, int] = field(default_factory=dict)
    # Requests that waited for this version to be loaded on demand, and how long (modelhost only).
    cold_start: Duration = field(default_factory=Duration)
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    # Only with --metrics-config summary_latencies=true / histogram_latencies=true (decoupled models).
    summaries: LatencySummaries | None = None
    first_response: Histogram | None = None

    def __post_init__(self) -> None:
        if _config.summary_latencies:
            self.summaries = LatencySummaries(_config.summary_quantiles)

    def executed(
        self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int, *, inferences: int | None = None
    ) -> None:
        """One execution of the model on `batch_size` rows, `inferences` of them requests' (all by default; the
        sequence batcher's padding rows are not)."""
        self.execution_count += 1
        self.inference_count += batch_size if inferences is None else inferences
        stats = self.batches.get(batch_size)
        if stats is None:
            stats = self.batches[batch_size] = BatchStats()
        stats.compute_input.add(input_ns)
        stats.compute_infer.add(infer_ns)
        stats.compute_output.add(output_ns)

    def succeeded(self, total_ns: int, timing: RequestTiming) -> None:
        self.last_inference_ms = time.time_ns() // 1_000_000
        self.success.add(total_ns)
        self.latency.add(total_ns)
        self.queue.add(timing.queue_ns)
        self.compute_input.add(timing.input_ns)
        self.compute_infer.add(timing.infer_ns)
        self.compute_output.add(timing.output_ns)
        if self.summaries is not None:
            self.summaries.observe(total_ns, timing)

    def served_from_cache(self, total_ns: int, lookup_ns: int) -> None:
        """A request answered from the response cache: a success, no queue, no compute, no execution."""
        self.last_inference_ms = time.time_ns() // 1_000_000
        self.success.add(total_ns)
        self.latency.add(total_ns)
        self.cache_hit.add(lookup_ns)
        if self.summaries is not None:
            self.summaries.cache_hit.observe(lookup_ns // 1000, time.monotonic())

    def cache_missed(self, ns: int) -> None:
        """A lookup that missed and the insertion of the response computed instead."""
        self.cache_miss.add(ns)
        if self.summaries is not None:
            self.summaries.cache_miss.observe(ns // 1000, time.monotonic())

    def failed(self, total_ns: int, reason: str) -> None:
        self.last_inference_ms = time.time_ns() // 1_000_000
        self.fail.add(total_ns)
        self.failures[reason] += 1

    def first_response_histogram(self, config: Any) -> Histogram | None:
        """The first-response histogram of a decoupled model (made on first use, with the buckets of its
        config); None unless histogram_latencies is on."""
        if self.first_response is None and _config.histogram_latencies:
            self.first_response = Histogram(first_response_buckets(config))
        return self.first_response

    def response_clock(self, config: Any) -> ResponseClock:
        """A clock for the responses of one request of a decoupled model (config: its model config)."""
        return ResponseClock(self, self.first_response_histogram(config))

    def to_json(self) -> dict[str, Any]:
        """Triton's statistics JSON for this version (HTTP; the gRPC message has the same fields)."""
        return {
            "name": self.name,
            "version": self.version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.to_json(),
                "fail": self.fail.to_json(),
                "queue": self.queue.to_json(),
                "compute_input": self.compute_input.to_json(),
                "compute_infer": self.compute_infer.to_json(),
                "compute_output": self.compute_output.to_json(),
                "cache_hit": self.cache_hit.to_json(),
                "cache_miss": self.cache_miss.to_json(),
            },
            "response_stats": {str(index): r.to_json() for index, r in sorted(self.responses.items())},
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": b.compute_input.to_json(),
                    "compute_infer": b.compute_infer.to_json(),
                    "compute_output": b.compute_output.to_json(),
                }
                for size, b in sorted(self.batches.items())
            ],
            "memory_usage": [
                {"type": "CPU", "id": 0, "byte_size": self.memory_bytes},
                *({"type": "GPU", "id": d, "byte_size": b} for d, b in sorted(self.gpu_memory_bytes.items())),
            ],
            "cold_start": self.cold_start.to_json(),
            "latency_histogram": self.latency.to_json(),
        }
