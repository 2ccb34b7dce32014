"""Triton's GPU metric families on a GPU, read through NVML, against what nvidia-smi says of the same GPU."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from e2e import server_process
from e2e.models import copy_examples
from e2e.server_process import RunningServer, running_server

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def frontend_processes() -> Iterator[int]:
    """The metrics port is the engine's in every mode: one server."""
    server_process.frontend_processes = 0
    yield 0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    pytest.importorskip("pynvml", reason="GPU metrics need the gpu-metrics extra (nvidia-ml-py)")
    repo = tmp_path_factory.mktemp("repo")
    copy_examples(repo, "simple")
    log = tmp_path_factory.mktemp("log") / "server.log"
    with running_server([repo], log, "--metrics-interval-ms=200") as running:
        yield running


def gpu_gauges(server: RunningServer) -> dict[str, dict[str, float]]:
    """family -> {gpu_uuid -> value} for the nv_gpu_* and nv_energy_* families."""
    text = requests.get(f"http://localhost:{server.metrics_port}/metrics", timeout=10).text
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith(("nv_gpu_", "nv_energy")):
            for sample in family.samples:
                found.setdefault(family.name, {})[sample.labels["gpu_uuid"]] = sample.value
    return found


def nvidia_smi(*fields: str) -> dict[str, list[str]]:
    """uuid -> the fields asked, as nvidia-smi prints them (no units)."""
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu=uuid,{','.join(fields)}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    rows = [[cell.strip() for cell in line.split(",")] for line in out.strip().splitlines()]
    return {row[0]: row[1:] for row in rows}


def test_gpu_gauges_agree_with_nvidia_smi(server: RunningServer) -> None:
    gauges = gpu_gauges(server)
    smi = nvidia_smi("memory.total", "power.limit")
    total = gauges["nv_gpu_memory_total_bytes"]
    assert set(total) == set(smi), (gauges, smi)  # one series per GPU, labelled with its UUID
    for uuid, (total_mib, power_limit) in smi.items():
        assert abs(total[uuid] - int(total_mib) * 2**20) < 2**20  # nvidia-smi rounds to MiB
        assert 0 <= gauges["nv_gpu_utilization"][uuid] <= 1
        assert 0 < gauges["nv_gpu_memory_used_bytes"][uuid] <= total[uuid]
        if power_limit not in ("[N/A]", "[Not Supported]"):
            assert abs(gauges["nv_gpu_power_limit"][uuid] - float(power_limit)) < 1.0
            assert 0 < gauges["nv_gpu_power_usage"][uuid] <= 1.5 * float(power_limit)


def test_energy_is_a_counter_that_grows(server: RunningServer) -> None:
    first = gpu_gauges(server)["nv_energy_consumption"]
    time.sleep(1.0)  # five polls at --metrics-interval-ms=200
    second = gpu_gauges(server)["nv_energy_consumption"]
    for uuid, joules in first.items():
        assert 0 <= joules <= second[uuid]
    assert any(second[uuid] > first[uuid] for uuid in first)  # an idle GPU still draws power
