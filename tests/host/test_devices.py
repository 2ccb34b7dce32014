"""How many cores the server counts: the affinity mask capped by the cgroup's CPU quota (a container's limit); and
how many GPUs: the driver's /proc entries, else nvidia-smi's list, narrowed by CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from modelhost.host import devices
from modelhost.host.devices import cgroup_cpu_quota, cpu_count


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_quota_in_the_process_cgroup(tmp_path: Path) -> None:
    _write(tmp_path / "proc", "0::/kubepods/pod1/c1\n")
    _write(tmp_path / "cg" / "kubepods/pod1/c1/cpu.max", "250000 100000\n")
    _write(tmp_path / "cg" / "cpu.max", "max 100000\n")  # the root's, not this process's
    assert cgroup_cpu_quota(tmp_path / "cg", tmp_path / "proc") == 2.5


def test_cgroup_v2_namespace_root_and_no_limit(tmp_path: Path) -> None:
    _write(tmp_path / "proc", "0::/\n")
    _write(tmp_path / "cg" / "cpu.max", "max 100000\n")
    assert cgroup_cpu_quota(tmp_path / "cg", tmp_path / "proc") is None
    _write(tmp_path / "cg" / "cpu.max", "150000 100000\n")
    assert cgroup_cpu_quota(tmp_path / "cg", tmp_path / "proc") == 1.5


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    _write(tmp_path / "proc", "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n0::/\n")
    _write(tmp_path / "cg" / "cpu/docker/abc/cpu.cfs_quota_us", "400000\n")
    _write(tmp_path / "cg" / "cpu/docker/abc/cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_quota(tmp_path / "cg", tmp_path / "proc") == 4.0
    _write(tmp_path / "cg" / "cpu/docker/abc/cpu.cfs_quota_us", "-1\n")
    assert cgroup_cpu_quota(tmp_path / "cg", tmp_path / "proc") is None


def test_no_cgroup_files_means_no_limit(tmp_path: Path) -> None:
    assert cgroup_cpu_quota(tmp_path / "none", tmp_path / "missing") is None


def test_cpu_count_is_capped_by_the_quota_rounded_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices.os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(devices, "cgroup_cpu_quota", lambda: 2.5)
    assert cpu_count() == 3
    monkeypatch.setattr(devices, "cgroup_cpu_quota", lambda: 0.2)
    assert cpu_count() == 1
    monkeypatch.setattr(devices, "cgroup_cpu_quota", lambda: None)
    assert cpu_count() == 64


def test_gpus_are_counted_from_the_drivers_proc_entries(tmp_path: Path) -> None:
    gpus = tmp_path / "gpus"
    gpus.mkdir()
    for bus in ("0000:17:00.0", "0000:65:00.0"):
        (gpus / bus).mkdir()
    assert devices.proc_gpus(gpus) == 2
    assert devices.proc_gpus(tmp_path / "no-driver") is None


def test_without_proc_entries_nvidia_smi_counts_them(monkeypatch: pytest.MonkeyPatch) -> None:
    listed = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)\n"

    def run(command: list[str], **kwargs: Any) -> Any:
        assert command == ["nvidia-smi", "-L"]
        return subprocess.CompletedProcess(command, 0, listed, "")

    monkeypatch.setattr(devices, "proc_gpus", lambda: None)
    monkeypatch.setattr(devices.subprocess, "run", run)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert devices.gpu_count.__wrapped__() == 1  # two listed, one visible


def test_without_a_driver_there_is_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(command: list[str], **kwargs: Any) -> Any:
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(devices, "proc_gpus", lambda: None)
    monkeypatch.setattr(devices.subprocess, "run", run)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert devices.gpu_count.__wrapped__() == 0
