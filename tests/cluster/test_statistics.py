"""The cluster's statistics: replicas' rows summed per model version, and the collector keeping stopped ones."""

from __future__ import annotations

from typing import Any

from modelhost.cluster import statistics
from modelhost.cluster.statistics import StatisticsCollector, merge, merge_metrics


def _row(name: str, count: int, last: int, batch: int = 1) -> dict[str, Any]:
    duration = {"count": count, "ns": 10 * count}
    return {
        "name": name,
        "version": "1",
        "last_inference": last,
        "inference_count": count,
        "execution_count": count,
        "inference_stats": {"success": duration, "queue": dict(duration)},
        "batch_stats": [{"batch_size": batch, "compute_infer": dict(duration)}],
        "memory_usage": [{"type": "CPU", "id": 0, "byte_size": 100}],
        "latency_histogram": {"unit": "ns", "buckets": [[64, count]]},
    }


def test_rows_of_replicas_are_summed_per_model_version() -> None:
    (a, b) = merge([[_row("a", 2, 50), _row("b", 1, 10)], [_row("a", 3, 70, batch=2)]])
    assert a["name"] == "a" and a["version"] == "1" and b["inference_count"] == 1
    assert a["inference_count"] == 5 and a["last_inference"] == 70
    assert a["inference_stats"]["success"] == {"count": 5, "ns": 50}
    assert [s["batch_size"] for s in a["batch_stats"]] == [1, 2]
    assert a["memory_usage"] == [{"type": "CPU", "id": 0, "byte_size": 200}]
    assert a["latency_histogram"] == {"unit": "ns", "buckets": [[64, 5]]}


def test_the_collector_keeps_what_stopped_replicas_counted(monkeypatch: Any) -> None:
    collector = StatisticsCollector()
    collector.report("r1", "dep", [_row("a", 2, 1)], "", "", (), final=False)
    collector.report("r2", "dep", [_row("a", 3, 1)], "", "", (), final=False)
    collector.report(
        "r2", "dep", [_row("a", 4, 2)], "", "", (), final=True
    )  # scaled in: its last count stays

    def count() -> int:
        return int(merge(r.rows for r in collector.reports())[0]["inference_count"])

    assert count() == 6
    monkeypatch.setattr(statistics, "SILENT_AFTER_S", -1.0)  # r1 went silent (killed): its last report stays
    assert count() == 6
    collector.forget("dep")  # deleted (unloaded): its counts go with it
    assert collector.reports() == []


def test_links_are_the_live_replicas_reports_without_their_statistics(monkeypatch: Any) -> None:
    collector = StatisticsCollector()
    collector.report("r1", "dep", [_row("a", 2, 1)], "nv_x 1\n", "10.0.0.1:7000", ("a",), final=False)
    collector.report("r2", "dep", [_row("a", 3, 1)], "", "", ("a",), final=False)  # no link (no token)
    collector.report("r3", "dep", [_row("a", 3, 1)], "", "10.0.0.3:7000", ("a",), final=True)  # stopped
    (link,) = collector.links()
    assert (link.replica, link.deployment, link.link, link.models) == ("r1", "dep", "10.0.0.1:7000", ("a",))
    assert link.rows == [] and link.page == ""  # what routing needs, not what the statistics sum
    monkeypatch.setattr(statistics, "SILENT_AFTER_S", -1.0)  # r1 went silent (killed): no link to it
    assert collector.links() == []


def test_metrics_pages_are_summed_by_series() -> None:
    page = """# HELP nv_inference_count Number of inferences
# TYPE nv_inference_count counter
nv_inference_count{model="a",version="1"} 3
nv_inference_count{model="b",version="1"} 1
# HELP nv_inference_queue_summary_us Summary
# TYPE nv_inference_queue_summary_us summary
nv_inference_queue_summary_us_count{model="a",version="1"} 3
nv_inference_queue_summary_us_sum{model="a",version="1"} 1.5
nv_inference_queue_summary_us{model="a",version="1",quantile="0.5"} 0.4
"""
    other = page.replace("} 3", "} 4").replace("1.5", "2.25")
    merged = merge_metrics([page, other]).splitlines()
    assert merged.count("# TYPE nv_inference_count counter") == 1
    assert 'nv_inference_count{model="a",version="1"} 7' in merged
    assert 'nv_inference_count{model="b",version="1"} 2' in merged
    assert 'nv_inference_queue_summary_us_count{model="a",version="1"} 7' in merged
    assert 'nv_inference_queue_summary_us_sum{model="a",version="1"} 3.75' in merged
    assert not any("quantile" in line for line in merged)
    assert merged.index("# TYPE nv_inference_queue_summary_us summary") < merged.index(
        'nv_inference_queue_summary_us_count{model="a",version="1"} 7'
    )
    assert merge_metrics([]) == ""
