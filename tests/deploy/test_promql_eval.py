"""The PromQL evaluator the chart's autoscaling test relies on, against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from deploy.promql_eval import Scrape, evaluate, parse_scrape

BEFORE = """\
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{model="a",version="1"} 1000
nv_inference_queue_duration_us{model="b",version="1"} 500
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="a",version="1"} 10
nv_inference_request_success{model="b",version="1"} 5
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="a",version="1"} 3
"""
AFTER = """\
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{model="a",version="1"} 9000
nv_inference_queue_duration_us{model="b",version="1"} 100
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="a",version="1"} 30
nv_inference_request_success{model="b",version="1"} 5
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="a",version="1"} 7
"""
POD = {"namespace": "ns", "pod": "p-1"}


def _scrapes() -> list[Scrape]:
    return [parse_scrape(BEFORE, 100.0, POD), parse_scrape(AFTER, 110.0, POD)]


def test_rate_is_the_slope_and_a_drop_is_a_counter_reset() -> None:
    rates = evaluate("rate(nv_inference_queue_duration_us[1m])", _scrapes())
    assert isinstance(rates, dict)
    by_model = {dict(labels)["model"]: value for labels, value in rates.items()}
    assert by_model == {"a": 800.0, "b": 10.0}  # b went 500 -> 100: restarted, so it rose by 100 in 10 s


def test_a_range_shorter_than_the_scrape_spacing_has_no_rate() -> None:
    assert evaluate("rate(nv_inference_queue_duration_us[5s])", _scrapes()) == {}


def test_aggregation_and_division_of_vectors() -> None:
    query = (
        'sum by (pod) (rate(nv_inference_queue_duration_us{namespace="ns",model="a"}[1m]))'
        ' / clamp_min(sum by (pod) (rate(nv_inference_request_success{namespace="ns",model="a"}[1m])), 0.001)'
    )
    assert evaluate(query, _scrapes()) == {frozenset({("pod", "p-1")}): 400.0}  # 8000 us over 20 requests


def test_selectors_filter_and_scalars_combine() -> None:
    assert evaluate('sum(nv_inference_pending_request_count{namespace="other"})', _scrapes()) == {}
    assert evaluate('sum(nv_inference_pending_request_count{pod=~"p-.*"}) * 2', _scrapes()) == {
        frozenset(): 14.0
    }
    assert evaluate("sum(rate(nv_inference_request_success[1m])) > 1", _scrapes()) == {frozenset(): 2.0}
    assert evaluate("sum(rate(nv_inference_request_success[1m])) > 5", _scrapes()) == {}


def test_zero_over_zero_is_nan_as_in_prometheus() -> None:
    idle = [parse_scrape(AFTER, 120.0, POD), parse_scrape(AFTER, 130.0, POD)]
    ratio = evaluate(
        "sum(rate(nv_inference_queue_duration_us[1m])) / sum(rate(nv_inference_request_success[1m]))", idle
    )
    assert isinstance(ratio, dict)
    assert math.isnan(ratio[frozenset()])


def test_what_it_does_not_evaluate_raises() -> None:
    with pytest.raises(NotImplementedError):
        evaluate("histogram_quantile(0.9, rate(nv_inference_request_duration_us_bucket[1m]))", _scrapes())
    with pytest.raises(NotImplementedError):
        evaluate("a / on (pod) b", _scrapes())
