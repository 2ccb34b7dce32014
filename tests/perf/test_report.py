"""The report of a perf run: a step's numbers, the CSV layout, the profile export and the plot page."""

from __future__ import annotations

import csv
import io
import json

from modelhost.perf.plot import html_page
from modelhost.perf.report import csv_header, csv_text, profile_export, step_text
from perf.models import SIMPLE, options, result

CSV_HEADER = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
    "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency"
)


def test_step_numbers() -> None:
    o = options()
    r = result(4, 1, o)
    assert r.throughput == 100 and r.latency_avg_us == 2000
    assert (r.send_us, r.recv_us) == (1, 3)
    assert r.server_avg_us("queue") == 100 and r.server_compute_us == 330
    assert r.server_overhead_us == 70  # 500 - 100 - 330
    assert r.network_us == 2000 - 1 - 3 - 100 - 330
    text = step_text(r, o)
    assert "Throughput: 100 infer/sec" in text
    assert "overhead 70 usec + queue 100 usec + compute input 10 usec" in text


def test_csv_layout() -> None:
    o = options()
    assert ",".join(csv_header(o)) == CSV_HEADER
    rows = list(csv.reader(io.StringIO(csv_text([result(8, 3, o), result(1, 1, o), result(4, 2, o)], o))))
    assert ",".join(rows[0]) == CSV_HEADER
    assert [row[0] for row in rows[1:]] == ["1", "4", "8"]  # sorted by throughput
    assert rows[1] == ["1", "100", "1", "1566", "100", "10", "300", "20", "3", "2000", "2000", "2000", "2000"]


def test_csv_variants() -> None:
    verbose = options("--verbose-csv")
    assert csv_header(verbose)[-3:] == ["Avg latency", "request/response", "response wait"]
    assert csv_header(options("--verbose-csv", "--percentile", "95"))[-2:] == [
        "request/response",
        "response wait",
    ]
    rate = options("--request-rate-range", "100:200:100")
    assert csv_header(rate)[0] == "Request Rate"
    rows = list(csv.reader(io.StringIO(csv_text([result(4, 1, verbose)], verbose))))
    assert len(rows[1]) == len(rows[0]) and rows[1][-3:] == ["2000", "4", "1996"]


def test_profile_export_and_plot() -> None:
    o = options()
    results = [result(1, 1, o), result(2, 2, o)]
    exported = profile_export(results, o, SIMPLE)
    assert [e["experiment"] for e in exported["experiments"]] == [
        {"mode": "concurrency", "value": 1},
        {"mode": "concurrency", "value": 2},
    ]
    first = exported["experiments"][0]
    assert len(first["requests"]) == 100
    request = first["requests"][0]
    assert request["response_timestamps"][0] - request["timestamp"] == 2_000_000
    assert len(first["window_boundaries"]) == 2
    json.dumps(exported)
    page = html_page(results, o, "simple <test>")
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "simple &lt;test&gt;" in page
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
