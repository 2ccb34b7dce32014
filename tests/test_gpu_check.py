"""scripts/gpu_check.sh and its companions, here without a GPU: the dry run prints the whole plan and exits 0, the
wheel list comes from this .venv, the summary is written from the test report and the benchmarks' JSON, and the
gpu test modules are found by their marker."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_dry_run_prints_every_step_and_exits_0(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--dry-run", "--out", str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for expected in (
        "[machine] nvidia-smi",
        "[install wheels] $",
        "--no-index --no-deps",
        "[import check (the machine's grpcio and protobuf)] $",
        "[tests marked gpu] $",
        "-m pytest -m gpu",
        "tests/e2e/test_gpu_cuda_shared_memory.py",
        "tests/e2e/test_gpu_python_tensors.py",
        "[GPU tensor transfer] $",
        "[many-core scaling] $",
        "--frontend-processes=auto",
        "[cleanup]",
        "summary.md",
    ):
        assert expected in out, expected
    for mode in ("0", "1", "2", "4", "8"):
        assert f"--frontend-processes={mode} " in out
    assert not (tmp_path / "out").exists()  # nothing ran, nothing written


def test_gpu_test_modules_are_found_by_their_marker() -> None:
    files = _gpu_check().gpu_test_files()
    assert "tests/e2e/test_gpu_pytorch.py" in files
    assert "tests/e2e/test_gpu_metrics.py" in files
    assert "tests/backends/tensorrt/test_trt_gpu.py" in files
    assert "tests/test_shared_memory.py" not in files
    for path in files:
        assert "pytest.mark.gpu" in (ROOT / path).read_text()


def test_the_summary_reads_the_reports(tmp_path: Path) -> None:
    gpu_check = _gpu_check()
    (tmp_path / "gpu-tests.xml").write_text(
        """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.e2e.test_gpu_pytorch" name="test_kind_gpu_instances_run_on_cuda" time="1.0"/>
<testcase classname="tests.e2e.test_gpu_metrics" name="test_energy_is_a_counter_that_grows" time="1.0">
  <failure message="AssertionError: assert 0 &gt; 0">details</failure></testcase>
<testcase classname="tests.e2e.test_gpu" name="test_gpu_instance_serves" time="0">
  <skipped type="pytest.skip" message="needs onnxruntime with CUDA (onnxruntime-gpu)">skipped</skipped></testcase>
</testsuite></testsuites>"""
    )
    transfer = {"bytes": 4096, "to_host_us": 9.5, "to_device_us": 11.0, "ipc_open_us": 250.0}
    (tmp_path / "transfer.json").write_text(json.dumps([{**transfer, "ipc_open_copy_close_us": 320.0}]))
    cell = {"mode": "auto", "model": "simple", "protocol": "http-binary", "concurrency": 256, "rps": 41234.5,
            "p50_ms": 5.1, "p99_ms": 9.9, "errors": 0, "first_error": "", "frontends": 8,
            "cpu": {"engine": 1.0, "frontends": 6.5, "client": 1.2}}  # fmt: skip
    (tmp_path / "scaling.json").write_text(
        json.dumps({"cores": 16, "concurrency": 256, "duration_s": 4, "cells": [cell], "not_run": ["8"]})
    )
    check = gpu_check.Check(tmp_path, tmp_path / "prepared", 480, sys.executable)
    check.facts = {
        "machine": {"gpus": ["NVIDIA H100 80GB HBM3, 580.1, 81559 MiB"], "cores": 16},
        "wrk": "carried",
    }
    data = gpu_check.summary(check)
    assert data["tests"]["counts"] == {"passed": 1, "failed": 1, "skipped": 1}
    text = gpu_check.markdown(data)
    assert "1 failed, 1 passed, 1 skipped" in text
    assert (
        "- failed: `tests.e2e.test_gpu_metrics::test_energy_is_a_counter_that_grows` — AssertionError" in text
    )
    assert "- skipped: `tests.e2e.test_gpu::test_gpu_instance_serves` — needs onnxruntime with CUDA" in text
    assert "| 4,096 | 9.5 | 11.0 | 250.0 | 320.0 |" in text
    assert "| auto | simple | http-binary | 41,234 | 5.1 | 9.9 | 1.0 | 6.5 (8) | 0 | 1.2 | 0 |" in text
    assert "Not run (time): --frontend-processes 8" in text
    assert "NVIDIA H100 80GB HBM3" in text


def test_the_prepare_script_lists_the_packages_it_would_carry() -> None:
    done = subprocess.run(
        ["bash", "scripts/gpu_check_prepare.sh", "--dry-run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "tritonclient==" in done.stdout and "grpcio-health-checking==" in done.stdout
    assert "grpcio==" in done.stdout and "protobuf==" in done.stdout  # the pins
    assert "wrk nghttp2-client" in done.stdout


def test_what_the_check_started_is_stopped_and_nothing_else(tmp_path: Path) -> None:
    gpu_check = _gpu_check()
    check = gpu_check.Check(tmp_path, tmp_path / "prepared", 480, sys.executable)
    ours = subprocess.Popen(["sleep", "60"], env=check.env, start_new_session=True)
    other = subprocess.Popen(["sleep", "61"], start_new_session=True)
    try:
        # Until the child has exec'd, /proc shows the parent's environment, without the mark.
        for _ in range(1000):
            if Path(f"/proc/{ours.pid}/cmdline").read_bytes() == b"sleep\x0060\x00":
                break
            time.sleep(0.01)
        left = gpu_check.stop_leftovers(check)
        assert left == ["sleep 60"]
        assert ours.wait(timeout=10) == -9
        assert other.poll() is None
    finally:
        for process in (ours, other):
            process.kill()
            process.wait()
