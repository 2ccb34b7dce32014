"""The memory flags on a real server: accepted without effect on a CPU-only host; with a GPU and onnxruntime-gpu,
mapped onto ONNX Runtime (the GPU tests skip cleanly elsewhere). The seams are tested in
tests/host/test_gpu_memory.py."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any, TypeVar

import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from e2e.models import add_identity
from e2e.server_process import running_server
from modelhost.backends.api import BackendContext
from modelhost.backends.onnxruntime.backend import OnnxRuntimeBackend
from modelhost.host.devices import gpu_count
from modelhost.host.gpu_memory import GpuMemory

HAS_GPU = gpu_count() > 0
_NO_ORT_CUDA = "needs onnxruntime with CUDA (onnxruntime-gpu), and this onnxruntime has none"
T = TypeVar("T")


def needs_gpu(test: T) -> T:
    """ONNX Runtime on a GPU: the gpu marker, and onnxruntime with CUDA (the GPU check machine has its CPU build)."""
    no_cuda = "CUDAExecutionProvider" not in ort.get_available_providers()
    return pytest.mark.skipif(no_cuda, reason=_NO_ORT_CUDA)(pytest.mark.gpu(test))


MEMORY_FLAGS = (
    "--cuda-memory-pool-byte-size=0:1000",
    "--model-load-gpu-limit=0:0.5",
)


@pytest.mark.skipif(HAS_GPU, reason="checks the CPU-only behaviour")
def test_cpu_only_host_accepts_the_memory_flags_and_says_they_have_no_effect(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    add_identity(repo, "identity", "FP32")
    flags = (*MEMORY_FLAGS, "--pinned-memory-pool-byte-size=0")
    with running_server([repo], tmp_path / "server.log", *flags) as server:
        log = server.log()
    for flag in MEMORY_FLAGS:
        name = flag.partition("=")[0]
        assert log.count(f"{name} has no effect: this host has no GPU") == 1, log
    assert "--pinned-memory-pool-byte-size is ignored" in log


def _repository_index(http_port: int) -> list[dict[str, Any]]:
    request = urllib.request.Request(f"http://127.0.0.1:{http_port}/v2/repository/index", data=b"{}")
    with urllib.request.urlopen(request, timeout=10) as response:
        index: list[dict[str, Any]] = json.loads(response.read())
    return index


@needs_gpu
def test_gpu_load_over_the_limit_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    add_identity(
        repo, "gpu_identity", "FP32", extra="instance_group [ { count: 1 kind: KIND_GPU gpus: [ 0 ] } ]"
    )
    # A limit of 0: any memory in use on GPU 0 (the instance's own, at least) is over it.
    args = ("--model-load-gpu-limit=0:0", "--exit-on-error=false", "--strict-readiness=false")
    with running_server([repo], tmp_path / "server.log", *args) as server:
        [entry] = _repository_index(server.http_port)
    assert entry["state"] == "UNAVAILABLE"
    assert (
        "can not create model 'gpu_identity_0_0': memory limit set for GPU 0 has exceeded" in entry["reason"]
    )


@needs_gpu
def test_gpu_load_under_the_limit_serves(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    add_identity(
        repo, "gpu_identity", "FP32", extra="instance_group [ { count: 1 kind: KIND_GPU gpus: [ 0 ] } ]"
    )
    with running_server([repo], tmp_path / "server.log", "--model-load-gpu-limit=0:1.0") as server:
        [entry] = _repository_index(server.http_port)
    assert entry["state"] == "READY"


@needs_gpu
def test_cuda_pool_is_the_sessions_gpu_mem_limit(tmp_path: Path) -> None:
    version_dir = add_identity(tmp_path, "m", "FP32", dims="[ 4 ]") / "1"
    config = text_format.Parse(
        (tmp_path / "m" / "config.pbtxt").read_text() + "instance_group [ { name: 'm_0' kind: KIND_GPU } ]",
        ModelConfig(),
    )
    ctx = BackendContext(
        model_name="m",
        version=1,
        model_dir=tmp_path / "m",
        version_dir=version_dir,
        config=config,
        gpu_count=gpu_count(),
        gpu_memory=GpuMemory(cuda_pool_bytes={0: 256 << 20}),
    )
    instance = OnnxRuntimeBackend().load_instance(ctx, config.instance_group[0], 0, 0)
    try:
        # What ONNX Runtime itself reports it runs with.
        cuda = instance.session.get_provider_options()["CUDAExecutionProvider"]
        assert cuda["gpu_mem_limit"] == str(256 << 20)
    finally:
        instance.close()
