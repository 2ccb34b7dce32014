"""deploy/grafana/modelhost-dashboard.json: importable as is, and every metric it queries is one modelhost exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from modelhost.frontends.metrics import family_names
from modelhost.options.metrics import MetricsConfig

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "modelhost-dashboard.json"
EVERYTHING = MetricsConfig(counter_latencies=True, histogram_latencies=True, summary_latencies=True)
# Sample-name suffixes of summaries and histograms.
SUFFIXES = ("_bucket", "_count", "_sum")


def _dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text(encoding="utf-8")))


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels


def _queried_metrics(dashboard: dict[str, Any]) -> set[str]:
    exprs = [t["expr"] for p in _panels(dashboard) for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    names = set()
    for expr in exprs:
        for name in re.findall(r"\b(nv_[a-z0-9_]+)", expr):
            for suffix in SUFFIXES:
                if name.endswith(suffix) and name[: -len(suffix)] in family_names(EVERYTHING):
                    name = name[: -len(suffix)]
            names.add(name)
    return names


def test_the_dashboard_is_importable_with_a_prometheus_datasource_input() -> None:
    dashboard = _dashboard()
    assert dashboard["__inputs"] == [
        {
            "name": "DS_PROMETHEUS",
            "label": "Prometheus",
            "description": dashboard["__inputs"][0]["description"],
            "type": "datasource",
            "pluginId": "prometheus",
            "pluginName": "Prometheus",
        }
    ]
    assert dashboard["title"] and dashboard["uid"] and isinstance(dashboard["schemaVersion"], int)
    ids = [p["id"] for p in _panels(dashboard)]
    assert len(ids) == len(set(ids))
    for panel in _panels(dashboard):
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
            assert panel["targets"]
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${DS_PROMETHEUS}"
                assert target["expr"].count("(") == target["expr"].count(")")


def test_every_queried_metric_is_exported() -> None:
    queried = _queried_metrics(_dashboard())
    exported = set(family_names(EVERYTHING, cpu=True, gpu=True))
    assert queried - exported == set()
    # What the dashboard is for: requests, failures, latency quantiles, queue, compute, pending, CPU.
    assert {
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_request_summary_us",
        "nv_inference_queue_summary_us",
        "nv_inference_compute_infer_summary_us",
        "nv_inference_pending_request_count",
        "nv_cpu_utilization",
    } <= queried
