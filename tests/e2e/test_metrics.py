"""The metrics endpoint with every optional family on: latency summaries, the first-response histogram of a
decoupled model (buckets from its model_metrics, labels from its metric_tags), CPU metrics; scraped and parsed
as Prometheus does, and checked against what was sent and against the statistics extension."""

from __future__ import annotations

import queue
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from e2e.models import copy_examples
from e2e.server_process import RunningServer, running_server, start_server
from modelhost.host.devices import gpu_count

PYTHON_MODELS = Path(__file__).parent / "python_models"
BUCKETS = ["1", "10", "100", "100000", "+Inf"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("metrics_repo")
    copy_examples(repo, "simple")
    shutil.copytree(PYTHON_MODELS / "exec_error", repo / "exec_error")
    shutil.copytree(PYTHON_MODELS / "square_decoupled", repo / "square_decoupled")
    config = repo / "square_decoupled" / "config.pbtxt"
    config.write_text(
        config.read_text()
        + """
metric_tags { key: "team" value: "search" }
model_metrics {
  metric_control: [
    {
      metric_identifier: { family: "nv_inference_first_response_histogram_ms" }
      histogram_options: { buckets: [ 1, 10, 100, 100000 ] }
    }
  ]
}
"""
    )
    log = tmp_path_factory.mktemp("metrics_log") / "server.log"
    args = (
        "--metrics-config=summary_latencies=true",
        "--metrics-config=histogram_latencies=true",
        "--metrics-config=summary_quantiles=0.5:0.05,0.99:0.001",
        "--allow-cpu-metrics=true",
        "--metrics-interval-ms=100",
    )
    with running_server([repo], log, *args) as running:
        yield running


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(server: RunningServer) -> tuple[dict[str, str], Samples]:
    """(family -> type, (sample name, labels) -> value)."""
    text = requests.get(f"http://localhost:{server.metrics_port}/metrics", timeout=10).text
    types: dict[str, str] = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            # The parser names a counter's samples <family>_total; Triton's counters have no suffix.
            name = family.name if sample.name == f"{family.name}_total" else sample.name
            samples[(name, frozenset(sample.labels.items()))] = sample.value
    return types, samples


def labels(model: str, **more: str) -> frozenset[tuple[str, str]]:
    return frozenset({"model": model, "version": "1", **more}.items())


def simple_inputs(rows: int, width: int = 16) -> list[httpclient.InferInput]:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [rows, width], "INT32")
        tensor.set_data_from_numpy(np.ones((rows, width), dtype=np.int32))
        inputs.append(tensor)
    return inputs


def test_counts_and_latency_summaries_match_what_was_sent(
    server: RunningServer, http: httpclient.InferenceServerClient
) -> None:
    for rows in (1, 2, 3, 1, 1):
        http.infer("simple", simple_inputs(rows))
    for _ in range(2):  # 15 columns instead of 16: refused before it runs
        with pytest.raises(InferenceServerException):
            http.infer("simple", simple_inputs(1, width=15))
    types, samples = scrape(server)
    simple = labels("simple")
    assert samples[("nv_inference_request_success", simple)] == 5
    assert samples[("nv_inference_count", simple)] == 8
    assert samples[("nv_inference_exec_count", simple)] == 5
    failures = {r: samples[("nv_inference_request_failure", labels("simple", reason=r))] for r in REASONS}
    assert failures == {"REJECTED": 0, "CANCELED": 0, "BACKEND": 0, "OTHER": 2}
    stats = http.get_inference_statistics("simple")["model_stats"][0]["inference_stats"]
    assert stats["success"]["count"] == 5 and stats["fail"]["count"] == 2
    for family, key in (
        ("request", "success"),
        ("queue", "queue"),
        ("compute_input", "compute_input"),
        ("compute_infer", "compute_infer"),
        ("compute_output", "compute_output"),
    ):
        name = f"nv_inference_{family}_summary_us"
        assert types[name] == "summary"
        assert samples[(f"{name}_count", simple)] == 5
        total = samples[(f"{name}_sum", simple)]
        counter = samples[(f"nv_inference_{family}_duration_us", simple)]
        # The summary sums whole microseconds per request, the counter the whole total: < 1 us apart each.
        assert counter - 5 <= total <= counter
        assert stats[key]["ns"] // 1000 == counter
        p50 = samples[(name, labels("simple", quantile="0.5"))]
        p99 = samples[(name, labels("simple", quantile="0.99"))]
        assert 0 <= p50 <= p99
        assert (name, labels("simple", quantile="0.9")) not in samples  # only the quantiles asked for
    assert samples[("nv_inference_request_summary_us", labels("simple", quantile="0.99"))] > 0


REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


def test_backend_failures_are_counted_by_reason(
    server: RunningServer, http: httpclient.InferenceServerClient
) -> None:
    tensor = httpclient.InferInput("INPUT0", [2], "FP32")
    tensor.set_data_from_numpy(np.ones(2, dtype=np.float32))
    for _ in range(3):
        with pytest.raises(InferenceServerException, match="execute fails on purpose"):
            http.infer("exec_error", [tensor])
    _, samples = scrape(server)
    failures = {r: samples[("nv_inference_request_failure", labels("exec_error", reason=r))] for r in REASONS}
    assert sum(failures.values()) == 3
    assert failures["BACKEND"] == 3
    assert samples[("nv_inference_request_success", labels("exec_error"))] == 0
    # Failed requests add nothing to the latency counters and summaries, as in Triton.
    assert samples[("nv_inference_request_duration_us", labels("exec_error"))] == 0
    assert samples[("nv_inference_request_summary_us_count", labels("exec_error"))] == 0


SERIES = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? \S+$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')


def test_labels_are_written_in_tritons_order(server: RunningServer) -> None:
    """Sorted by name, as prometheus-cpp writes them (`_<tag>`, model, reason, version), with a summary's
    quantile and a histogram's le last: scrapers that match lines as text (Triton's qa tests do) find them."""
    text = requests.get(f"http://localhost:{server.metrics_port}/metrics", timeout=10).text
    # The pattern of Triton's L0_model_queue, L0_request_cancellation and L0_backend_python lifecycle tests.
    assert re.search(
        r'^nv_inference_request_failure\{model="simple",reason="OTHER",version="1"\} \d+$', text, re.M
    )
    assert re.search(
        r'^nv_inference_count\{_team="search",model="square_decoupled",version="1"\} \d+$', text, re.M
    )
    seen = 0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = SERIES.match(line)
        assert match is not None, line
        names = LABEL.findall(match["labels"] or "")
        if names and names[-1] in ("quantile", "le"):
            names.pop()
        assert names == sorted(names), line
        seen += "model" in names
    assert seen > 20


def _stream(server: RunningServer, values: list[int]) -> list[Any]:
    """Send one request per value to square_decoupled on one stream; return every response (final included)."""
    results: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=partial(lambda q, result, error: q.put(error or result), results))
    try:
        for i, value in enumerate(values):
            tensor = grpcclient.InferInput("IN", [1], "INT32")
            tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
            client.async_stream_infer(
                "square_decoupled", [tensor], request_id=str(i), enable_empty_final_response=True
            )
        replies = [results.get(timeout=30) for _ in range(sum(values) + len(values))]
    finally:
        client.stop_stream()
        client.close()
    return replies


def test_first_response_histogram_and_response_stats_of_a_decoupled_model(
    server: RunningServer, http: httpclient.InferenceServerClient
) -> None:
    replies = _stream(server, [3, 3])
    assert not any(isinstance(r, InferenceServerException) for r in replies)
    types, samples = scrape(server)
    name = "nv_inference_first_response_histogram_ms"
    assert types[name] == "histogram"
    tagged = labels("square_decoupled", _team="search")
    assert samples[(f"{name}_count", tagged)] == 2
    assert samples[(f"{name}_sum", tagged)] > 0
    buckets = {
        le: samples[(f"{name}_bucket", labels("square_decoupled", _team="search", le=le))] for le in BUCKETS
    }
    assert buckets["+Inf"] == 2 and buckets["100000"] == 2
    assert list(buckets.values()) == sorted(buckets.values())  # cumulative
    # Only decoupled models have one; the tags label every family of the model.
    assert (f"{name}_count", labels("simple")) not in samples
    assert samples[("nv_inference_request_success", tagged)] == 2
    assert ("nv_inference_request_success", labels("square_decoupled")) not in samples

    stats = http.get_inference_statistics("square_decoupled")["model_stats"][0]["response_stats"]
    assert sorted(stats) == ["0", "1", "2", "3"]
    for index in ("0", "1", "2"):
        assert stats[index]["success"]["count"] == 2
        assert stats[index]["compute_infer"]["count"] == 2
        assert stats[index]["compute_output"]["count"] == 2
        assert stats[index]["empty_response"]["count"] == 0
    assert stats["3"]["empty_response"]["count"] == 2
    assert stats["3"]["success"]["count"] == 0


def test_cpu_metrics(server: RunningServer) -> None:
    types, samples = scrape(server)
    for name in ("nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes"):
        assert types[name] == "gauge"
    assert 0 <= samples[("nv_cpu_utilization", frozenset())] <= 1
    total = samples[("nv_cpu_memory_total_bytes", frozenset())]
    assert 0 < samples[("nv_cpu_memory_used_bytes", frozenset())] <= total


@pytest.mark.skipif(gpu_count() > 0, reason="a GPU is present")
def test_no_gpu_families_without_a_gpu(server: RunningServer) -> None:
    types, _ = scrape(server)
    assert not [name for name in types if name.startswith("nv_gpu_") or name == "nv_energy_consumption"]
    assert "GPU metrics: not reported" in server.log()


def test_metrics_can_be_turned_off(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    copy_examples(repo, "simple")
    running = start_server([repo], tmp_path / "server.log", "--allow-metrics=false")
    try:
        assert requests.get(f"http://localhost:{running.http_port}/v2/health/ready", timeout=5).ok
        with socket.socket() as s, pytest.raises(OSError):
            s.settimeout(2)
            s.connect(("127.0.0.1", running.metrics_port))
    finally:
        running.stop()


def test_a_bad_metrics_config_stops_the_server_at_startup(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "modelhost", "serve", f"--model-repository={tmp_path}"]
    for setting, message in (
        ("summary_latncies=true", "--metrics-config: unknown setting 'summary_latncies'"),
        ("summary_quantiles=0.5", "--metrics-config summary_quantiles: '0.5' has no ':'"),
    ):
        argv = [*command, f"--metrics-config={setting}"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2
        assert message in done.stderr
