"""Custom metrics: families, metrics, and Triton's checks and messages."""

from __future__ import annotations

import re

import pytest

from backends.python.pb_utils.fake_runtime import FakeRuntime
from modelhost.backends.python import pb_utils


def test_metric_family_and_metrics(runtime: FakeRuntime) -> None:
    family = pb_utils.MetricFamily("requests_total", "Requests", pb_utils.MetricFamily.COUNTER)
    assert runtime.families == [("requests_total", "Requests", "COUNTER")]
    counter = family.Metric(labels={"model": "m"})
    counter.increment(2)
    counter.increment(0.5)
    assert counter.value() == 2.5
    assert runtime.metrics == [("requests_total", {"model": "m"}, None)]
    gauge = pb_utils.MetricFamily("queue", "Queue", pb_utils.MetricFamily.GAUGE).Metric()
    gauge.set(4)
    gauge.increment(-1)
    histogram = pb_utils.MetricFamily("latency", "Latency", pb_utils.MetricFamily.HISTOGRAM).Metric(
        labels={}, buckets=[0.1, 1.0]
    )
    histogram.observe(0.3)
    assert runtime.metrics[-1] == ("latency", {}, [0.1, 1.0])
    assert [op for _, op, _ in runtime.updates] == ["increment", "increment", "set", "increment", "observe"]


def test_metric_argument_checks(runtime: FakeRuntime) -> None:
    counter_family = pb_utils.MetricFamily("c", "C", pb_utils.MetricFamily.COUNTER)
    counter = counter_family.Metric()
    with pytest.raises(
        pb_utils.TritonModelException,
        match=re.escape(
            "Failed to increment metric value: TRITONSERVER_METRIC_KIND_COUNTER can only be incremented "
            "monotonically by non-negative values."
        ),
    ):
        counter.increment(-1)
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Failed to set metric value: .*COUNTER does not support Set$"
    ):
        counter.set(1)
    with pytest.raises(pb_utils.TritonModelException, match=r"COUNTER does not support Observe"):
        counter.observe(1)
    gauge = pb_utils.MetricFamily("g", "G", pb_utils.MetricFamily.GAUGE).Metric()
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Failed to observe metric value: .*GAUGE does not"
    ):
        gauge.observe(1)
    histogram_family = pb_utils.MetricFamily("h", "H", pb_utils.MetricFamily.HISTOGRAM)
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Failed to create metric. Missing required buckets.$"
    ):
        histogram_family.Metric(labels={})
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Failed to create metric. Unexpected buckets found.$"
    ):
        counter_family.Metric(buckets=[1.0])
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Failed to create metric. Labels must be a dictionary.$"
    ):
        counter_family.Metric(labels=[("a", "b")])  # type: ignore[arg-type]
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Failed to create metric. Buckets must be a list.$"
    ):
        histogram_family.Metric(buckets=(1.0, 2.0))  # type: ignore[arg-type]
    with pytest.raises(pb_utils.TritonModelException, match=r"strictly sorted"):
        histogram_family.Metric(buckets=[2.0, 1.0])
    histogram = histogram_family.Metric(buckets=[1.0])
    with pytest.raises(pb_utils.TritonModelException, match=r"HISTOGRAM does not support Increment"):
        histogram.increment(1)
    with pytest.raises(
        pb_utils.TritonModelException,
        match=r"^Failed to get metric value: .*HISTOGRAM does not support Value$",
    ):
        histogram.value()
    with pytest.raises(TypeError):
        pb_utils.MetricFamily("k", "K", 0)  # type: ignore[arg-type]
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Error when creating MetricFamily: Invalid metric name$"
    ):
        pb_utils.MetricFamily("bad name", "B", pb_utils.MetricFamily.GAUGE)
    runtime.fail_with = "family 'c' already exists as a counter"
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Error when creating MetricFamily: family 'c' already"
    ):
        pb_utils.MetricFamily("c", "C", pb_utils.MetricFamily.GAUGE)
    with pytest.raises(pb_utils.TritonModelException, match=r"^Failed to increment metric value: family 'c'"):
        counter.increment(1)


def test_metrics_without_runtime() -> None:
    with pytest.raises(pb_utils.TritonModelException, match=r"no Triton runtime is installed"):
        pb_utils.MetricFamily("c", "C", pb_utils.MetricFamily.COUNTER)
