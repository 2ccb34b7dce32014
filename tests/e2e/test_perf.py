"""`python -m modelhost perf` as users run it, against a real server serving the `simple` example.

Short sweeps (-p 300, at most 3 windows per level): the tests check what is reported, never how fast.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.models import copy_examples
from e2e.server_process import RunningServer, free_ports, running_server

CSV_HEADER = [
    "Concurrency",
    "Inferences/Second",
    "Client Send",
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
    "Client Recv",
    "p50 latency",
    "p90 latency",
    "p95 latency",
    "p99 latency",
]
SHORT = ["-p", "300", "-r", "3", "--processes", "1"]
E2E = Path(__file__).parent


@pytest.fixture(scope="module")
def perf_server(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("perf_repo")
    copy_examples(repo, "simple")
    shutil.copytree(E2E / "python_models" / "repeat_decoupled", repo / "repeat_decoupled")
    shutil.copytree(E2E / "sequence_models" / "py_accumulator", repo / "py_accumulator")
    log = tmp_path_factory.mktemp("perf_log") / "server.log"
    with running_server([repo], log, "--allow-client-shm=true") as running:
        yield running


def perf(*args: str) -> subprocess.CompletedProcess[str]:
    return perf_process(*args)[0]


def perf_process(*args: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """perf's result and its process id, which names its shared-memory regions (modelhost_perf_<pid>_...): other
    runs on the machine may have regions of their own meanwhile."""
    command = [sys.executable, "-m", "modelhost", "perf", *args]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), process.pid


def read_csv(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_http_sweep_writes_csv_export_and_plot(perf_server: RunningServer, tmp_path: Path) -> None:
    out = perf(
        "-m",
        "simple",
        "-u",
        perf_server.http_url,
        *SHORT,
        "--concurrency-range",
        "1:2",
        "-f",
        str(tmp_path / "perf.csv"),
        "--profile-export-file",
        str(tmp_path / "export.json"),
        "--plot",
        str(tmp_path / "plot"),
    )
    assert out.returncode == 0, out.stderr
    assert "Request concurrency: 1" in out.stdout and "Request concurrency: 2" in out.stdout
    assert "Avg HTTP time:" in out.stdout and "Avg request latency:" in out.stdout
    assert "Inferences/Second vs. Client Average Batch Latency" in out.stdout
    rows = read_csv(tmp_path / "perf.csv")
    assert rows[0] == CSV_HEADER
    assert sorted(row[0] for row in rows[1:]) == ["1", "2"]
    for row in rows[1:]:
        assert len(row) == len(CSV_HEADER)
        assert float(row[1]) > 0
        assert all(int(cell) >= 0 for cell in row[2:])
        assert int(row[6]) > 0  # the server's compute infer time, from the statistics API
    exported = json.loads((tmp_path / "export.json").read_text())
    assert [e["experiment"] for e in exported["experiments"]] == [
        {"mode": "concurrency", "value": 1},
        {"mode": "concurrency", "value": 2},
    ]
    for experiment in exported["experiments"]:
        assert experiment["requests"]
        request = experiment["requests"][0]
        assert request["response_timestamps"][0] >= request["timestamp"]
        assert experiment["summary"]["server"]["success_count"] > 0
    assert (tmp_path / "plot.html").read_text().startswith("<!DOCTYPE html>")


def test_grpc_with_percentile(perf_server: RunningServer, tmp_path: Path) -> None:
    out = perf(
        "-m",
        "simple",
        "-i",
        "grpc",
        "-u",
        perf_server.grpc_url,
        *SHORT,
        "--percentile",
        "95",
        "-b",
        "2",
        "-f",
        str(tmp_path / "perf.csv"),
    )
    assert out.returncode == 0, out.stderr
    assert "Stabilizing using p95 latency" in out.stdout
    assert "Avg gRPC time:" in out.stdout
    assert "Client p95 Batch Latency" in out.stdout
    rows = read_csv(tmp_path / "perf.csv")
    assert rows[0] == CSV_HEADER and len(rows) == 2


def test_request_rate_with_json_input_data(perf_server: RunningServer, tmp_path: Path) -> None:
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"data": [{"INPUT0": list(range(16)), "INPUT1": [1] * 16}]}))
    out = perf(
        "-m",
        "simple",
        "-u",
        perf_server.http_url,
        *SHORT,
        "--request-rate-range",
        "50:100:50",
        "--request-distribution",
        "poisson",
        "--input-data",
        str(data),
        "--input-tensor-format",
        "json",
        "--output-tensor-format",
        "json",
        "-f",
        str(tmp_path / "perf.csv"),
    )
    assert out.returncode == 0, out.stderr
    assert "Request Rate: 50" in out.stdout and "Request Rate: 100" in out.stdout
    rows = read_csv(tmp_path / "perf.csv")
    assert rows[0] == ["Request Rate", *CSV_HEADER[1:]]
    assert sorted(float(row[0]) for row in rows[1:]) == [50, 100]


def one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode not in (0, 2), out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr
    return lines[0]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_dead_server(protocol: str) -> None:
    (port,) = free_ports(1)
    line = one_line_error(perf("-m", "simple", "-i", protocol, "-u", f"localhost:{port}", *SHORT))
    assert line.startswith("modelhost perf: error: cannot reach the server")


def test_unknown_model(perf_server: RunningServer) -> None:
    line = one_line_error(perf("-m", "nosuch", "-u", perf_server.http_url, *SHORT))
    assert "nosuch" in line and "unknown model" in line
    line = one_line_error(perf("-m", "nosuch", "-i", "grpc", "-u", perf_server.grpc_url, *SHORT))
    assert "nosuch" in line


def test_bad_input_data_and_flags(perf_server: RunningServer, tmp_path: Path) -> None:
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"data": [{"INPUT0": [1, 2, 3], "INPUT1": [1] * 16}]}))
    line = one_line_error(perf("-m", "simple", "-u", perf_server.http_url, "--input-data", str(data)))
    assert "entry 1, input INPUT0: 3 elements" in line
    out = perf("-m", "simple", "--concurrency-range", "x")
    assert out.returncode == 2 and "usage: modelhost perf" in out.stderr


def server_stats(server: RunningServer, model: str) -> dict[str, int]:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/stats", timeout=10) as response:
        stats = json.load(response)["model_stats"][0]["inference_stats"]
    return {key: int(stats[key]["count"]) for key in ("success", "fail")}


def shm_regions(server: RunningServer) -> list[object]:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/systemsharedmemory/status", timeout=10) as r:
        return list(json.load(r))


def test_decoupled_model_over_a_stream(perf_server: RunningServer, tmp_path: Path) -> None:
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"data": [{"IN": [1, 2, 3], "DELAY": [0, 0, 0]}]}))
    args = ["-m", "repeat_decoupled", "-i", "grpc", "-u", perf_server.grpc_url, *SHORT, "-s", "50"]
    args += ["--input-data", str(data), "--shape", "IN:3", "--shape", "DELAY:3", "--concurrency-range", "1:2"]
    line = one_line_error(perf(*args))
    assert "is decoupled: use --streaming" in line
    before = server_stats(perf_server, "repeat_decoupled")
    out = perf(
        *args, "--streaming", "-f", str(tmp_path / "perf.csv"), "--profile-export-file", str(tmp_path / "x")
    )
    assert out.returncode == 0, out.stderr
    assert "Request concurrency: 1" in out.stdout and "Request concurrency: 2" in out.stdout
    assert out.stdout.count("Avg responses per request: 3.00") == 2  # one response per IN element
    assert "Avg time to first response:" in out.stdout
    rows = read_csv(tmp_path / "perf.csv")
    assert rows[0] == CSV_HEADER and len(rows) == 3
    after = server_stats(perf_server, "repeat_decoupled")
    assert after["success"] > before["success"] and after["fail"] == before["fail"]
    summary = json.loads((tmp_path / "x").read_text())["experiments"][0]["summary"]
    assert summary["responses_per_request"] == 3


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sequence_model(perf_server: RunningServer, protocol: str, tmp_path: Path) -> None:
    url = perf_server.http_url if protocol == "http" else perf_server.grpc_url
    before = server_stats(perf_server, "py_accumulator")
    out = perf(
        "-m",
        "py_accumulator",
        "-i",
        protocol,
        "-u",
        url,
        *SHORT,
        "-s",
        "50",
        "--concurrency-range",
        "1:2",
        "--sequence-length",
        "5",
        "--sequence-id-range",
        "100:104",
        "-f",
        str(tmp_path / "perf.csv"),
    )
    assert out.returncode == 0, out.stderr
    rows = read_csv(tmp_path / "perf.csv")
    assert sorted(row[0] for row in rows[1:]) == ["1", "2"]
    after = server_stats(perf_server, "py_accumulator")
    # Every request carried a sequence id the model had state for: a request out of its sequence fails.
    assert after["success"] > before["success"] + 10 and after["fail"] == before["fail"]


def test_sequence_model_refusals(perf_server: RunningServer) -> None:
    base = ["-m", "py_accumulator", "-u", perf_server.http_url, *SHORT]
    line = one_line_error(perf(*base, "--request-rate-range", "10"))
    assert "sequence model" in line and "--concurrency-range" in line
    line = one_line_error(perf(*base, "--concurrency-range", "3", "--sequence-id-range", "1:3"))
    assert "--sequence-id-range 1:3 holds 2 sequence ids" in line


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_system_shared_memory(perf_server: RunningServer, protocol: str, tmp_path: Path) -> None:
    url = perf_server.http_url if protocol == "http" else perf_server.grpc_url
    before = server_stats(perf_server, "simple")
    out, pid = perf_process(
        "-m",
        "simple",
        "-i",
        protocol,
        "-u",
        url,
        *SHORT[:-2],
        "--processes",
        "2",
        "-s",
        "50",
        "--concurrency-range",
        "1:2",
        "--shared-memory",
        "system",
        "-b",
        "2",
        "-f",
        str(tmp_path / "perf.csv"),
    )
    assert out.returncode == 0, out.stderr
    rows = read_csv(tmp_path / "perf.csv")
    assert sorted(row[0] for row in rows[1:]) == ["1", "2"]
    after = server_stats(perf_server, "simple")
    assert after["success"] > before["success"] and after["fail"] == before["fail"]
    assert shm_regions(perf_server) == []  # unregistered at the end
    assert not list(Path("/dev/shm").glob(f"modelhost_perf_{pid}_*"))


@pytest.fixture(scope="module")
def refusing_server(
    tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    """A server without --allow-client-shm (the default), for both protocols' refusals."""
    repo = tmp_path_factory.mktemp("refusing_repo")
    copy_examples(repo, "simple")
    with running_server([repo], tmp_path_factory.mktemp("refusing_log") / "server.log") as running:
        yield running


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_shared_memory_refused_by_the_server(protocol: str, refusing_server: RunningServer) -> None:
    url = refusing_server.http_url if protocol == "http" else refusing_server.grpc_url
    out, pid = perf_process("-m", "simple", "-i", protocol, "-u", url, *SHORT, "--shared-memory", "system")
    line = one_line_error(out)
    assert line.startswith("modelhost perf: error: --shared-memory system: the server does not allow")
    assert "--allow-client-shm=true" in line
    assert not list(Path("/dev/shm").glob(f"modelhost_perf_{pid}_*"))
