"""The metrics endpoint's pieces: --metrics-config, the windowed quantiles, the rendering of every family
(parsed as Prometheus parses it), CPU readings from /proc, GPU readings through a stand-in for NVML."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from google.protobuf import text_format
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.cli.errors import CliError
from modelhost.cli.serve_args import parse_serve_args
from modelhost.frontends.metrics import family_names, model_labels, render
from modelhost.observability import stats as stats_module
from modelhost.observability.cpu_metrics import CpuMetrics, read_cpu_times, read_memory
from modelhost.observability.custom_metrics import CustomMetrics
from modelhost.observability.gpu_metrics import GPU_FAMILIES, start_gpu_metrics
from modelhost.observability.stats import (
    DEFAULT_FIRST_RESPONSE_BUCKETS,
    Histogram,
    ModelStats,
    RequestTiming,
    WindowedQuantiles,
    configure_metrics,
    first_response_buckets,
)
from modelhost.options.metrics import DEFAULT_QUANTILES, MetricsConfig, parse_metrics_config


@pytest.fixture(autouse=True)
def default_metrics_config() -> Iterator[None]:
    yield
    configure_metrics(MetricsConfig())


# --- --metrics-config


def test_defaults_are_tritons() -> None:
    config = parse_metrics_config({})
    assert config == MetricsConfig(True, False, False, DEFAULT_QUANTILES)
    assert DEFAULT_QUANTILES == ((0.5, 0.05), (0.9, 0.01), (0.95, 0.001), (0.99, 0.001), (0.999, 0.001))


def test_settings_are_parsed() -> None:
    config = parse_metrics_config(
        {
            "counter_latencies": "false",
            "histogram_latencies": "TRUE",
            "summary_latencies": "1",
            "summary_quantiles": '"0.5:0.05, 0.99:0.001"',
        }
    )
    assert config == MetricsConfig(False, True, True, ((0.5, 0.05), (0.99, 0.001)))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"summary_latencies": "yes"}, "summary_latencies must be true or false, got 'yes'"),
        ({"latencies": "true"}, "unknown setting 'latencies'"),
        ({"summary_quantiles": "0.5"}, "'0.5' has no ':'"),
        ({"summary_quantiles": "0.5:x"}, "is not <quantile>:<error> with two numbers"),
        ({"summary_quantiles": "1.5:0.01"}, "quantile and error must be between 0 and 1"),
        ({"summary_quantiles": ""}, "has no ':'"),
    ],
)
def test_bad_settings_are_refused(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_metrics_config(settings)


def test_quantile_numbers_are_read_as_tritonserver_reads_them() -> None:
    # std::stod: the numeric prefix ("0.0.1" is 0.0); Triton's L0_metrics starts the server so.
    config = parse_metrics_config({"summary_quantiles": "0.1:0.0.1,0.7:0.01, .75:1e-2"})
    assert config.summary_quantiles == ((0.1, 0.0), (0.7, 0.01), (0.75, 0.01))


def test_the_cli_takes_the_metrics_flags() -> None:
    options = parse_serve_args(
        [
            "--metrics-config=summary_latencies=true",
            "--metrics-config",
            "summary_quantiles=0.9:0.01",
            "--metrics-config=summary_latencies=false",  # the last one given wins
            "--allow-cpu-metrics=false",
            "--allow-gpu-metrics=off",
            "--metrics-interval-ms=250.5",
        ]
    )
    assert options.metrics_config == {"summary_latencies": "false", "summary_quantiles": "0.9:0.01"}
    assert (options.allow_cpu_metrics, options.allow_gpu_metrics) == (False, False)
    assert options.metrics_interval_ms == 250.5


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--metrics-config=summary_latencies"], "--metrics-config format is '<setting>=<value>'"),
        (["--metrics-config==true"], "--metrics-config format is '<setting>=<value>'"),
        (["--metrics-config=colour=blue"], "--metrics-config: unknown setting 'colour'"),
        (["--metrics-interval-ms=0"], "--metrics-interval-ms must be greater than 0"),
        (["--metrics-interval-ms=abc"], "--metrics-interval-ms: invalid number"),
    ],
)
def test_the_cli_refuses_bad_metrics_flags(argv: list[str], message: str) -> None:
    with pytest.raises(CliError, match=message):
        parse_serve_args(argv)


# --- windowed quantiles


def test_quantiles_are_within_the_relative_accuracy() -> None:
    window = WindowedQuantiles()
    values = [float(v) for v in range(1, 10_001)]
    random.Random(7).shuffle(values)
    for v in values:
        window.observe(v, 0.0)
    qs = [0.5, 0.9, 0.99, 0.999]
    for q, estimate in zip(qs, window.quantiles(qs, now=0.0), strict=True):
        exact = sorted(values)[round(q * (len(values) - 1))]
        assert abs(estimate - exact) / exact <= 0.01


def test_quantiles_of_nothing_are_nan_and_zeros_count() -> None:
    window = WindowedQuantiles()
    assert all(math.isnan(v) for v in window.quantiles([0.5, 0.99], now=0.0))
    for _ in range(99):
        window.observe(0, 0.0)
    window.observe(1000, 0.0)
    assert window.quantiles([0.5, 1.0], now=0.0)[0] == 0.0
    assert abs(window.quantiles([1.0], now=0.0)[0] - 1000) <= 10


def test_quantiles_forget_what_is_older_than_the_window() -> None:
    window = WindowedQuantiles(max_age_s=60, age_buckets=5)
    start = window._next_rotation - 12  # the window's own clock
    for _ in range(100):
        window.observe(10.0, start)
    window.observe(1000.0, start + 50)  # in the last age bucket
    assert abs(window.quantiles([0.5], now=start + 55)[0] - 10) <= 0.1  # both still in the window
    assert abs(window.quantiles([0.5], now=start + 61)[0] - 1000) <= 10  # the first 12 s have gone
    assert math.isnan(window.quantiles([0.5], now=start + 500)[0])


def test_memory_is_bounded_by_the_value_range() -> None:
    window = WindowedQuantiles()
    for i in range(200_000):
        window.observe(1 + (i % 1000) * 1000.0, 0.0)
    assert len(window._bins) < 2000


# --- statistics


def test_summaries_cost_nothing_unless_asked_for() -> None:
    assert ModelStats("m", "1").summaries is None
    configure_metrics(MetricsConfig(summary_latencies=True))
    stats = ModelStats("m", "1")
    assert stats.summaries is not None
    stats.succeeded(
        5_000_999, RequestTiming(queue_ns=1_500, input_ns=2_000, infer_ns=3_000_000, output_ns=10)
    )
    summaries = stats.summaries
    assert (summaries.request.count, summaries.request.sum) == (1, 5000)
    assert (summaries.queue.sum, summaries.compute_input.sum, summaries.compute_output.sum) == (1, 2, 0)
    assert summaries.compute_infer.sum == 3000
    stats.failed(1_000, "OTHER")  # failures are not latencies
    assert summaries.request.count == 1


def test_histogram_buckets_come_from_model_metrics() -> None:
    plain = ModelConfig(name="m")
    assert first_response_buckets(plain) == DEFAULT_FIRST_RESPONSE_BUCKETS == (100, 500, 2000, 5000)
    config = text_format.Parse(
        """name: "m"
        model_metrics { metric_control [
          { metric_identifier { family: "other_family" } histogram_options { buckets: [ 7 ] } },
          { metric_identifier { family: "nv_inference_first_response_histogram_ms" }
            histogram_options { buckets: [ 2.5, -1, 0, 1 ] } }
        ] }""",
        ModelConfig(),
    )
    assert first_response_buckets(config) == (-1, 0, 1, 2.5)
    histogram = Histogram((1.0, 10.0))
    for value in (0.5, 1.0, 5.0, 50.0):
        histogram.observe(value)
    assert (histogram.cumulative(), histogram.count, histogram.sum) == ([2, 3], 4, 56.5)


def test_response_stats_are_kept_per_response_index() -> None:
    configure_metrics(MetricsConfig(histogram_latencies=True))
    stats = ModelStats("m", "1")
    for _ in range(2):
        clock = stats.response_clock(ModelConfig(name="m"))
        for kind in ("success", "fail", "empty_response"):
            clock.arrived()
            clock.done(kind)
    answer = stats.to_json()["response_stats"]
    assert sorted(answer) == ["0", "1", "2"]
    assert answer["0"]["success"]["count"] == 2 and answer["0"]["compute_output"]["count"] == 2
    assert answer["1"]["fail"]["count"] == 2 and answer["1"]["compute_output"]["count"] == 0
    assert answer["2"]["empty_response"]["count"] == 2 and answer["2"]["compute_infer"]["count"] == 2
    assert answer["0"]["cancel"] == {"count": 0, "ns": 0}
    assert stats.first_response is not None and stats.first_response.count == 2


# --- rendering


def _families(text: bytes) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text.decode())}


def _model(stats: ModelStats, config: ModelConfig | None = None, decoupled: bool = False) -> Any:
    return SimpleNamespace(stats=stats, config=config or ModelConfig(name=stats.name), decoupled=decoupled)


def test_the_default_families() -> None:
    stats = ModelStats("m", "1")
    stats.succeeded(2_500_000, RequestTiming(queue_ns=1_000_000))
    stats.failed(7_000_000, "BACKEND")
    families = _families(render([stats]))
    assert sorted(families) == sorted(family_names(MetricsConfig()))
    duration = families["nv_inference_request_duration_us"].samples[0]
    assert duration.value == 2500  # successful requests only, as Triton
    failures = {s.labels["reason"]: s.value for s in families["nv_inference_request_failure"].samples}
    assert failures == {"REJECTED": 0, "CANCELED": 0, "BACKEND": 1, "OTHER": 0}


def test_counter_latencies_false_leaves_the_duration_counters_out() -> None:
    families = _families(render([ModelStats("m", "1")], config=MetricsConfig(counter_latencies=False)))
    assert not [name for name in families if name.endswith("_duration_us")]
    assert "nv_inference_request_success" in families


def test_summaries_and_histograms_render_as_prometheus_reads_them() -> None:
    config = MetricsConfig(histogram_latencies=True, summary_latencies=True, summary_quantiles=((0.5, 0.05),))
    configure_metrics(config)
    stats = ModelStats("m", "1")
    for ms in (1, 2, 3):
        stats.succeeded(ms * 1_000_000, RequestTiming())
    decoupled = ModelStats("d", "1")
    clock = decoupled.response_clock(ModelConfig(name="d"))
    clock.arrived()
    clock.done("success")
    families = _families(render([_model(stats), _model(decoupled, decoupled=True)], config=config))
    assert set(family_names(config)) == set(families)
    summary = families["nv_inference_request_summary_us"]
    assert summary.type == "summary"
    values = {
        (s.name, s.labels.get("quantile")): s.value for s in summary.samples if s.labels["model"] == "m"
    }
    assert values[("nv_inference_request_summary_us_count", None)] == 3
    assert values[("nv_inference_request_summary_us_sum", None)] == 6000
    assert abs(values[("nv_inference_request_summary_us", "0.5")] - 2000) <= 20
    empty = [s.value for s in summary.samples if s.labels["model"] == "d" and "quantile" in s.labels]
    assert len(empty) == 1 and math.isnan(empty[0])  # nothing observed: NaN, as prometheus-cpp
    histogram = families["nv_inference_first_response_histogram_ms"]
    assert histogram.type == "histogram"
    assert {s.labels["model"] for s in histogram.samples} == {"d"}  # decoupled models only
    buckets = {s.labels["le"]: s.value for s in histogram.samples if s.name.endswith("_bucket")}
    assert buckets == {"100": 1, "500": 1, "2000": 1, "5000": 1, "+Inf": 1}


def test_a_cached_model_has_cache_summaries_and_no_request_summary() -> None:
    # As Triton: with summary_latencies and the response cache, nv_cache_{hit,miss}_summary_per_model; no
    # nv_inference_request_summary_us for the cached model (Triton's DLIS-4762; its L0_metrics checks both).
    config = MetricsConfig(summary_latencies=True, summary_quantiles=((0.5, 0.05),))
    configure_metrics(config)
    stats = ModelStats("c", "1")
    stats.cached = True
    stats.served_from_cache(3_000_000, 2_000_000)
    stats.cache_missed(5_000_000)
    text = render([_model(stats)], config=config).decode()
    assert "nv_inference_request_summary" not in text
    families = _families(text.encode())
    assert set(families) == set(family_names(config, cache=True)) - {
        "nv_inference_request_summary_us",
        *(
            name
            for name in family_names(config, cache=True)
            if name.startswith("nv_cache_") and "per_model" not in name
        ),
    }
    hit = {
        s.name: s.value
        for s in families["nv_cache_hit_summary_per_model"].samples
        if "quantile" not in s.labels
    }
    miss = {
        s.name: s.value
        for s in families["nv_cache_miss_summary_per_model"].samples
        if "quantile" not in s.labels
    }
    assert hit == {"nv_cache_hit_summary_per_model_count": 1, "nv_cache_hit_summary_per_model_sum": 2000}
    assert miss == {"nv_cache_miss_summary_per_model_count": 1, "nv_cache_miss_summary_per_model_sum": 5000}


def test_metric_tags_label_every_family_of_the_model() -> None:
    config = text_format.Parse(
        'name: "m" metric_tags { key: "team" value: "a\\"b" } metric_tags { key: "bad-key" value: "x" }',
        ModelConfig(),
    )
    assert model_labels("m", "1", config) == '_team="a\\"b",model="m",version="1"'
    families = _families(render([_model(ModelStats("m", "1"), config)]))
    for family in families.values():
        for sample in family.samples:
            assert sample.labels["_team"] == 'a"b'
            assert "_bad-key" not in sample.labels


def test_labels_are_written_sorted_by_name_as_triton_writes_them() -> None:
    """prometheus-cpp holds a metric's labels in a std::map: Triton writes them sorted by name, a summary's
    quantile and a histogram's le after them. Text-matching scrapers (Triton's qa tests) depend on the order."""
    config = MetricsConfig(histogram_latencies=True, summary_latencies=True, summary_quantiles=((0.5, 0.05),))
    configure_metrics(config)
    tagged = text_format.Parse('name: "t" metric_tags { key: "zone" value: "z" }', ModelConfig())
    stats, decoupled = ModelStats("m", "1"), ModelStats("t", "2")
    stats.failed(1_000, "BACKEND")
    clock = decoupled.response_clock(tagged)
    clock.arrived()
    clock.done("success")
    lines = (
        render([_model(stats), _model(decoupled, tagged, decoupled=True)], config=config)
        .decode()
        .splitlines()
    )
    assert 'nv_inference_request_failure{model="m",reason="BACKEND",version="1"} 1' in lines
    assert 'nv_inference_request_failure{_zone="z",model="t",reason="OTHER",version="2"} 0' in lines
    assert 'nv_inference_count{_zone="z",model="t",version="2"} 0' in lines
    assert 'nv_inference_request_summary_us{model="m",version="1",quantile="0.5"} NaN' in lines
    assert (
        'nv_inference_first_response_histogram_ms_bucket{_zone="z",model="t",version="2",le="+Inf"} 1'
        in lines
    )
    assert 'nv_model_load_duration_secs{model="m",version="1"} 0' in lines


def test_custom_metric_labels_are_sorted_by_name_whatever_order_the_model_gave() -> None:
    custom = CustomMetrics()
    custom.register_family("requests", "Requests", "COUNTER")
    custom.register_family("sizes", "Sizes", "HISTOGRAM")
    custom.register(1, 1, "requests", {"version": "1", "model": "m", "Zeta": "z"}, None)
    custom.register(2, 1, "requests", {"model": "m", "Zeta": "z", "version": "1"}, None)  # the same metric
    custom.register(1, 2, "requests", {}, None)
    custom.register(1, 3, "sizes", {"version": "1", "model": "m"}, [1.0])
    custom.update(1, 1, "increment", 2)
    custom.update(2, 1, "increment", 1)
    custom.update(1, 3, "observe", 0.5)
    lines = custom.render()
    assert 'requests{Zeta="z",model="m",version="1"} 3' in lines
    assert "requests 0" in lines  # no labels: no braces, as prometheus-cpp
    assert 'sizes_bucket{model="m",version="1",le="1"} 1' in lines
    assert 'sizes_count{model="m",version="1"} 1' in lines


# --- CPU


def test_cpu_readings(tmp_path: Path) -> None:
    assert read_cpu_times("cpu  10 1 5 100 4 2 3 1 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n") == (22, 104)
    meminfo = (
        "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    250 kB\nHugePages_Total: 0\n"
    )
    assert read_memory(meminfo) == (1_024_000, 768_000)
    with pytest.raises(ValueError):
        read_memory("MemTotal: 1 kB\n")
    (tmp_path / "stat").write_text("cpu  100 0 0 100 0 0 0 0 0 0\n")
    (tmp_path / "meminfo").write_text(meminfo)
    cpu = CpuMetrics(tmp_path)
    assert cpu.utilization == 0.0
    (tmp_path / "stat").write_text("cpu  130 0 0 110 0 0 0 0 0 0\n")  # 30 busy, 10 idle since
    cpu.poll()
    assert cpu.utilization == 0.75
    families = _families("\n".join(cpu.render()).encode())
    assert families["nv_cpu_utilization"].samples[0].value == 0.75
    assert families["nv_cpu_memory_total_bytes"].samples[0].value == 1_024_000
    assert families["nv_cpu_memory_used_bytes"].samples[0].value == 768_000


def test_cpu_metrics_of_this_machine() -> None:
    cpu = CpuMetrics()
    cpu.poll()
    assert 0 <= cpu.utilization <= 1
    assert 0 < cpu.memory_used <= cpu.memory_total


# --- GPU


class FakeNvml:
    def __init__(self, count: int = 2, fail_init: bool = False) -> None:
        self.count = count
        self.fail_init = fail_init
        self.energy: dict[int, int] = {}

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return f"GPU-{handle}".encode()

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return SimpleNamespace(gpu=40)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=80 << 30, used=1 << 30)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        if handle == 1:
            raise RuntimeError("Not Supported")
        return 70_500  # mW

    def nvmlDeviceGetPowerManagementLimit(self, handle: int) -> int:
        return 700_000

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        self.energy[handle] = self.energy.get(handle, 5_000 * handle) + 1_500  # mJ since the driver loaded
        return self.energy[handle]


def test_gpu_metrics_through_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpu = start_gpu_metrics(FakeNvml())
    assert gpu is not None
    gpu.poll()
    families = _families("\n".join(gpu.render()).encode())
    assert sorted(families) == sorted(GPU_FAMILIES)
    values = {(f, s.labels["gpu_uuid"]): s.value for f, family in families.items() for s in family.samples}
    assert values[("nv_gpu_utilization", "GPU-0")] == 0.4
    assert values[("nv_gpu_memory_total_bytes", "GPU-1")] == 80 << 30
    assert values[("nv_gpu_power_usage", "GPU-0")] == 70.5
    assert ("nv_gpu_power_usage", "GPU-1") not in values  # what NVML cannot read is left out
    assert values[("nv_gpu_power_limit", "GPU-0")] == 700
    assert values[("nv_energy_consumption", "GPU-0")] == 1.5  # joules since the server started
    assert families["nv_energy_consumption"].type == "counter"


def test_gpu_metrics_follow_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    gpu = start_gpu_metrics(FakeNvml())
    assert gpu is not None and [g.uuid for g in gpu.gpus] == ["GPU-1"]


def test_no_gpu_metrics_without_nvml_or_a_gpu(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="modelhost")
    assert start_gpu_metrics(FakeNvml(fail_init=True)) is None
    assert start_gpu_metrics(FakeNvml(count=0)) is None
    assert "NVML is not available" in caplog.text and "no GPU" in caplog.text


def test_the_stats_module_default_is_off() -> None:
    assert stats_module.metrics_config() == MetricsConfig()
