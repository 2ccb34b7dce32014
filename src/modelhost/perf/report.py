"""perf_analyzer's reports: the text per load level, the summary, the `-f` CSV and `--profile-export-file`."""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import modelhost
from modelhost.perf.client import ModelInfo
from modelhost.perf.measure import StepResult
from modelhost.perf.options import PerfOptions

SERVER_COLUMNS = [
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
]


def settings_text(options: PerfOptions, processes: int) -> str:
    latency = "average latency" if options.percentile < 0 else f"p{options.percentile} latency"
    lines = [
        "*** Measurement Settings ***",
        f"  Batch size: {options.batch_size}",
        "  Service Kind: Triton",
        '  Using "time_windows" mode for stabilization',
        f"  Stabilizing using {latency}",
        f"  Measurement window: {options.interval_ms} msec",
    ]
    if options.is_concurrency:
        assert options.concurrency is not None
        c = options.concurrency
        end = "until the latency threshold" if c.end == 0 else str(int(c.end))
        lines.append(
            f"  Latency limit: {options.latency_threshold_ms:g} msec" if options.latency_threshold_ms else ""
        )
        lines.append(f"  Concurrency limit: {end} concurrent requests")
        lines.append("  Using asynchronous calls for inference")
    else:
        assert options.request_rate is not None
        lines.append(f"  Request Rate limit: {options.request_rate.end:g} requests per seconds")
        lines.append(f"  Using {options.distribution} distribution on request generation")
        lines.append("  Using asynchronous calls for inference")
    lines.append(f"  Load generation: {processes} process(es), {options.protocol.upper()}")
    return "\n".join(line for line in lines if line) + "\n"


def step_text(result: StepResult, options: PerfOptions) -> str:
    us = round
    kind = "Request concurrency" if result.mode == "concurrency" else "Request Rate"
    lines = [f"{kind}: {result.value_text}", "  Client: ", f"    Request count: {result.request_count}"]
    lines.append(f"    Throughput: {result.throughput:g} infer/sec")
    if options.percentile < 0:
        lines.append(
            f"    Avg latency: {us(result.latency_avg_us)} usec "
            f"(standard deviation {us(result.latency_std_us)} usec)"
        )
    for p, value in result.percentiles_us.items():
        lines.append(f"    p{p} latency: {us(value)} usec")
    if options.protocol == "http":
        lines.append(
            f"    Avg HTTP time: {us(result.latency_avg_us)} usec (send/recv "
            f"{us(result.send_us + result.recv_us)} usec + response wait {us(result.response_wait_us)} usec)"
        )
    else:
        lines.append(
            f"    Avg gRPC time: {us(result.latency_avg_us)} usec (response wait {us(result.response_wait_us)} usec)"
        )
    if result.first_response_us is not None and result.responses_per_request is not None:
        lines.append(f"    Avg time to first response: {us(result.first_response_us)} usec")
        lines.append(f"    Avg responses per request: {result.responses_per_request:.2f}")
    s = result.server
    lines += [
        "  Server: ",
        f"    Inference count: {s.inference_count}",
        f"    Execution count: {s.execution_count}",
        f"    Successful request count: {s.success_count}",
        f"    Avg request latency: {us(result.server_avg_us('request'))} usec (overhead "
        f"{us(result.server_overhead_us)} usec + queue {us(result.server_avg_us('queue'))} usec + compute input "
        f"{us(result.server_avg_us('compute_input'))} usec + compute infer "
        f"{us(result.server_avg_us('compute_infer'))} usec + compute output "
        f"{us(result.server_avg_us('compute_output'))} usec)",
    ]
    if not result.stable:
        lines.append(f"  (not stable after {result.trials} windows)")
    return "\n".join(lines) + "\n"


def summary_text(results: Sequence[StepResult], options: PerfOptions) -> str:
    which = "Average" if options.percentile < 0 else f"p{options.percentile}"
    lines = [f"Inferences/Second vs. Client {which} Batch Latency"]
    for r in results:
        name = "Concurrency" if r.mode == "concurrency" else "Request Rate"
        lines.append(
            f"{name}: {r.value_text}, throughput: {r.throughput:g} infer/sec, "
            f"latency {round(r.latency_us(options.percentile))} usec"
        )
    return "\n".join(lines) + "\n"


def csv_header(options: PerfOptions) -> list[str]:
    header = ["Concurrency" if options.is_concurrency else "Request Rate", "Inferences/Second", "Client Send"]
    header += SERVER_COLUMNS
    header.append("Client Recv")
    header += [f"p{p} latency" for p in options.percentiles]
    if options.verbose_csv:
        if options.percentile < 0:
            header.append("Avg latency")
        header += ["request/response", "response wait"]
    return header


def csv_rows(results: Sequence[StepResult], options: PerfOptions) -> list[list[str]]:
    """perf_analyzer's rows: microseconds as integers, sorted by increasing throughput."""
    rows: list[list[str]] = []
    for r in sorted(results, key=lambda r: r.throughput):
        row = [r.value_text, f"{r.throughput:g}", str(int(r.send_us))]
        row += [
            str(int(r.network_us)),
            str(int(r.server_avg_us("queue"))),
            str(int(r.server_avg_us("compute_input"))),
            str(int(r.server_avg_us("compute_infer"))),
            str(int(r.server_avg_us("compute_output"))),
        ]
        row.append(str(int(r.recv_us)))
        row += [str(int(r.percentiles_us[p])) for p in options.percentiles]
        if options.verbose_csv:
            if options.percentile < 0:
                row.append(str(int(r.latency_avg_us)))
            row += [str(int(r.send_us) + int(r.recv_us)), str(int(r.response_wait_us))]
        rows.append(row)
    return rows


def csv_text(results: Sequence[StepResult], options: PerfOptions) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(csv_header(options))
    writer.writerows(csv_rows(results, options))
    return out.getvalue()


def write_csv(path: Path, results: Sequence[StepResult], options: PerfOptions) -> None:
    path.write_text(csv_text(results, options))


def profile_export(results: Sequence[StepResult], options: PerfOptions, info: ModelInfo) -> dict[str, Any]:
    """perf_analyzer's profile export: per experiment, every request of the reported windows with its send
    and response timestamps (ns since the epoch), and the window boundaries."""
    offset = time.time_ns() - time.monotonic_ns()
    experiments = []
    for r in results:
        firsts = r.firsts.tolist() if r.firsts.size == r.ends.size else [None] * r.ends.size
        requests = [
            {
                "timestamp": int(s) + offset,
                "sequence_id": 0,
                # streaming: the first and the final response, when they differ
                "response_timestamps": [
                    int(x) + offset for x in ([f, e] if f is not None and f != e else [e])
                ],
            }
            for s, e, f in zip(r.starts.tolist(), r.ends.tolist(), firsts, strict=True)
        ]
        experiments.append(
            {
                "experiment": {
                    "mode": r.mode,
                    "value": int(r.value) if r.mode == "concurrency" else r.value,
                },
                "requests": requests,
                "window_boundaries": [b + offset for b in r.window_bounds],
                "summary": summary_json(r, options),
            }
        )
    return {
        "experiments": experiments,
        "version": modelhost.__version__,
        "service_kind": "triton",
        "endpoint": "",
        "model": info.name,
        "model_version": info.version,
        "protocol": options.protocol,
        "batch_size": options.batch_size,
    }


def summary_json(r: StepResult, options: PerfOptions) -> dict[str, Any]:
    return {
        "stable": r.stable,
        "windows": r.trials,
        "request_count": r.request_count,
        "duration_s": r.duration_s,
        "throughput_infer_per_sec": r.throughput,
        "latency_avg_us": r.latency_avg_us,
        "latency_std_us": r.latency_std_us,
        **{f"latency_p{p}_us": v for p, v in r.percentiles_us.items()},
        **(
            {
                "first_response_avg_us": r.first_response_us,
                "responses_per_request": r.responses_per_request,
            }
            if r.first_response_us is not None
            else {}
        ),
        "client_send_us": r.send_us,
        "client_recv_us": r.recv_us,
        "server": {
            "inference_count": r.server.inference_count,
            "execution_count": r.server.execution_count,
            "success_count": r.server.success_count,
            "request_us": r.server_avg_us("request"),
            "overhead_us": r.server_overhead_us,
            "queue_us": r.server_avg_us("queue"),
            "compute_input_us": r.server_avg_us("compute_input"),
            "compute_infer_us": r.server_avg_us("compute_infer"),
            "compute_output_us": r.server_avg_us("compute_output"),
        },
    }


def write_profile_export(
    path: Path, results: Sequence[StepResult], options: PerfOptions, info: ModelInfo
) -> None:
    path.write_text(json.dumps(profile_export(results, options, info), indent=1) + "\n")
