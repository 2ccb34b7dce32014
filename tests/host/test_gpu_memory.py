"""The memory flags at their seams: what is logged at startup, the CUDA provider options a GPU instance gets, the
--model-load-gpu-limit check on a fake NVML reading. Runs without a GPU; tests/e2e/test_memory_flags.py has the
checks that need one, and the CPU-only server run."""

from __future__ import annotations

import asyncio
import gc
import logging
import subprocess
import sys
import types
import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.backends.api import BackendContext
from modelhost.backends.onnxruntime import backend as ort_backend
from modelhost.engine.registry.entries import LoadSettings
from modelhost.engine.registry.registry import ModelRegistry
from modelhost.errors import Unavailable
from modelhost.host import gpu_memory
from modelhost.host.gpu_memory import (
    GpuMemory,
    GpuUsage,
    check_load_limit,
    nvml_device,
    read_gpu_memory,
    startup_notes,
)
from modelhost.options import ServerOptions
from modelhost.repository.sources import open_repository

GIB = 1 << 30

# --- Startup notes


def test_nothing_is_logged_when_no_memory_flag_is_given() -> None:
    assert startup_notes(ServerOptions().gpu_memory(), gpu_count=0) == []
    assert startup_notes(ServerOptions().gpu_memory(), gpu_count=2) == []


def test_on_a_cpu_only_host_each_flag_given_has_no_effect_once() -> None:
    options = ServerOptions(
        cuda_memory_pool_byte_size={0: 1000, 1: 2000},
        model_load_gpu_limit={0: 0.5},
    )
    assert startup_notes(options.gpu_memory(), gpu_count=0) == [
        (logging.INFO, "--cuda-memory-pool-byte-size has no effect: this host has no GPU"),
        (logging.INFO, "--model-load-gpu-limit has no effect: this host has no GPU"),
    ]


def test_with_a_gpu_settings_for_gpus_that_are_not_there_are_warned_about() -> None:
    options = ServerOptions(
        cuda_memory_pool_byte_size={0: 1000, 2: 1000}, model_load_gpu_limit={0: 0.5, 5: 0.5}
    )
    assert startup_notes(options.gpu_memory(), gpu_count=2) == [
        (
            logging.WARNING,
            "--cuda-memory-pool-byte-size names GPU 2, but 2 GPU(s) are visible: it has no effect",
        ),
        (logging.WARNING, "--model-load-gpu-limit names GPU 5, but 2 GPU(s) are visible: it has no effect"),
    ]


def test_settings_reach_the_backends_from_the_options() -> None:
    options = ServerOptions(cuda_memory_pool_byte_size={0: 1000}, model_load_gpu_limit={1: 0.5})
    assert options.gpu_memory() == GpuMemory({0: 1000}, {1: 0.5})


GPU_CONFIG = """
name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { name: "m_0" count: 1 kind: KIND_GPU } ]
"""


def gpu_context(tmp_path: Path, memory: GpuMemory, extra: str = "") -> BackendContext:
    version_dir = tmp_path / "m" / "1"
    version_dir.mkdir(parents=True)
    (version_dir / "model.onnx").write_bytes(b"")  # the fake session below never reads it
    config = text_format.Parse(GPU_CONFIG + extra, ModelConfig())
    return BackendContext(
        model_name="m",
        version=1,
        model_dir=tmp_path / "m",
        version_dir=version_dir,
        config=config,
        gpu_count=2,
        gpu_memory=memory,
    )


@pytest.fixture
def cuda_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """onnxruntime as an onnxruntime-gpu build reports itself."""
    monkeypatch.setattr(
        ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )


def cuda_options(providers: list[Any]) -> dict[str, Any]:
    [options] = [opts for name, opts in providers if name == "CUDAExecutionProvider"]
    return dict(options)


@pytest.mark.usefixtures("cuda_build")
def test_gpu_providers_carry_the_cuda_pool_of_their_gpu(tmp_path: Path) -> None:
    ctx = gpu_context(tmp_path, GpuMemory(cuda_pool_bytes={1: 64 << 20}))
    assert cuda_options(ort_backend.gpu_providers(ctx, 1)) == {"device_id": 1, "gpu_mem_limit": str(64 << 20)}
    assert cuda_options(ort_backend.gpu_providers(ctx, 0)) == {"device_id": 0}


@pytest.mark.usefixtures("cuda_build")
def test_a_models_own_cuda_gpu_mem_limit_wins_over_the_flag(tmp_path: Path) -> None:
    accelerator = """
optimization { execution_accelerators { gpu_execution_accelerator [
  { name: "cuda" parameters { key: "gpu_mem_limit" value: "2048" } } ] } }
"""
    ctx = gpu_context(tmp_path, GpuMemory(cuda_pool_bytes={0: 1000}), accelerator)
    assert cuda_options(ort_backend.gpu_providers(ctx, 0)) == {"device_id": 0, "gpu_mem_limit": "2048"}


# --- --model-load-gpu-limit


@pytest.fixture
def gpu_reading(monkeypatch: pytest.MonkeyPatch) -> dict[int, GpuUsage | None]:
    """What the fake NVML reports, by CUDA device; a device left out must not be read at all."""
    readings: dict[int, GpuUsage | None] = {}
    monkeypatch.setattr(gpu_memory, "read_gpu_memory", lambda device: readings[device])
    return readings


def test_a_load_over_the_limit_is_refused_in_tritonservers_words(
    gpu_reading: dict[int, GpuUsage | None],
) -> None:
    gpu_reading[0] = GpuUsage(used=int(0.93 * 80 * GIB), total=80 * GIB)
    with pytest.raises(Unavailable) as raised:
        check_load_limit(GpuMemory(load_limits={0: 0.8}), "m_0_0", 0)
    assert str(raised.value) == (
        "can not create model 'm_0_0': memory limit set for GPU 0 has exceeded, model loading is rejected "
        "(used 0.93 > limit 0.80)"
    )


def test_a_load_at_or_under_the_limit_goes_on(gpu_reading: dict[int, GpuUsage | None]) -> None:
    gpu_reading[0] = GpuUsage(used=8 * GIB, total=10 * GIB)
    check_load_limit(GpuMemory(load_limits={0: 0.8}), "m_0_0", 0)  # used == limit: tritonserver loads it
    check_load_limit(GpuMemory(load_limits={0: 1.0}), "m_0_0", 0)


def test_a_gpu_without_a_limit_is_not_read(gpu_reading: dict[int, GpuUsage | None]) -> None:
    check_load_limit(GpuMemory(load_limits={1: 0.1}), "m_0_0", 0)  # gpu_reading has no GPU 0: not read
    check_load_limit(GpuMemory(), "m_0_0", 0)


def test_usage_that_cannot_be_read_is_logged_and_the_load_goes_on(
    gpu_reading: dict[int, GpuUsage | None], caplog: pytest.LogCaptureFixture
) -> None:
    gpu_reading[0] = None
    with caplog.at_level(logging.WARNING, logger="modelhost.gpu_memory"):
        check_load_limit(GpuMemory(load_limits={0: 0.5}), "m_0_0", 0)
    assert "cannot read the memory usage of GPU 0" in caplog.text
    assert "--model-load-gpu-limit is not checked for 'm_0_0'" in caplog.text


class FakeSession:
    """Stands in for ort.InferenceSession: records the providers; weak references tell whether it was freed."""

    made: list[weakref.ref[FakeSession]] = []

    def __init__(self, path: str, sess_options: Any = None, providers: list[Any] | None = None) -> None:
        self.providers = providers or []
        FakeSession.made.append(weakref.ref(self))

    def get_inputs(self) -> list[Any]:
        return [SimpleNamespace(name="INPUT0", type="tensor(float)", shape=[None, 4])]

    def get_outputs(self) -> list[Any]:
        return [SimpleNamespace(name="OUTPUT0", type="tensor(float)", shape=[None, 4])]

    def get_overridable_initializers(self) -> list[Any]:
        return []


@pytest.fixture
def fake_sessions(monkeypatch: pytest.MonkeyPatch, cuda_build: None) -> list[weakref.ref[FakeSession]]:
    FakeSession.made = []
    monkeypatch.setattr(ort, "InferenceSession", FakeSession)
    return FakeSession.made


def test_a_gpu_instance_gets_its_limits_and_is_checked_once_created(
    tmp_path: Path, fake_sessions: list[weakref.ref[FakeSession]], gpu_reading: dict[int, GpuUsage | None]
) -> None:
    ctx = gpu_context(tmp_path, GpuMemory(cuda_pool_bytes={0: 1000}, load_limits={0: 0.5}))
    gpu_reading[0] = GpuUsage(used=1, total=10)
    instance = ort_backend.OnnxRuntimeBackend().load_instance(ctx, ctx.config.instance_group[0], 0, 0)
    assert isinstance(instance.session, FakeSession)
    assert cuda_options(instance.session.providers)["gpu_mem_limit"] == "1000"


def test_a_gpu_instance_over_the_limit_fails_and_releases_its_session(
    tmp_path: Path, fake_sessions: list[weakref.ref[FakeSession]], gpu_reading: dict[int, GpuUsage | None]
) -> None:
    # The server checks after any backend's KIND_GPU instance is created (as tritonserver does), and closes it.
    (tmp_path / "repo" / "m" / "1").mkdir(parents=True)
    (tmp_path / "repo" / "m" / "1" / "model.onnx").write_bytes(b"")  # the fake session never reads it
    (tmp_path / "repo" / "m" / "config.pbtxt").write_text(GPU_CONFIG)
    settings = LoadSettings(auto_complete=False, gpu_count=1, gpu_memory=GpuMemory(load_limits={0: 0.5}))
    registry = ModelRegistry([open_repository(str(tmp_path / "repo"))], settings)
    gpu_reading[0] = GpuUsage(used=6, total=10)
    try:
        asyncio.run(registry.start())
        [entry] = registry.index()
        assert entry["state"] == "UNAVAILABLE"
        assert "can not create model 'm_0_0': memory limit set for GPU 0 has exceeded" in str(entry["reason"])
        gc.collect()
        # The refused instance's session is freed: its GPU memory is not held until the failure is forgotten.
        assert [ref() for ref in fake_sessions] == [None]
    finally:
        registry.close()


def test_a_cpu_instance_is_never_checked(
    tmp_path: Path, fake_sessions: list[weakref.ref[FakeSession]]
) -> None:
    # gpu_reading is not installed: reading the GPU here would call the real NVML.
    ctx = gpu_context(tmp_path, GpuMemory(load_limits={0: 0.0}), "instance_group [ { kind: KIND_CPU } ]")
    group = ctx.config.instance_group[1]
    instance = ort_backend.OnnxRuntimeBackend().load_instance(ctx, group, 0, 0)
    assert instance.session.providers == ["CPUExecutionProvider"]


# --- Reading the GPU's memory: NVML, else nvidia-smi


class FakeNvml(types.ModuleType):
    """pynvml with one 80 GiB GPU per index or UUID given."""

    def __init__(self, free: dict[Any, int]) -> None:
        super().__init__("pynvml")
        self.free = free
        self.shut_down = False

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return self._handle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: bytes) -> Any:
        return self._handle(uuid)

    def _handle(self, key: Any) -> Any:
        if key not in self.free:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return key

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        return SimpleNamespace(total=80 * GIB, free=self.free[handle], used=0)


@pytest.fixture
def no_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """nvidia-smi as on a host without the driver; the commands tried are recorded."""
    commands: list[list[str]] = []

    def run(command: list[str], **kwargs: Any) -> Any:
        commands.append(command)
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(gpu_memory.subprocess, "run", run)
    return commands


@pytest.mark.usefixtures("no_nvidia_smi")
def test_nvml_reading_counts_used_as_total_minus_free(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml({0: 20 * GIB})
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert read_gpu_memory(0) == GpuUsage(used=60 * GIB, total=80 * GIB)
    assert nvml.shut_down


@pytest.mark.usefixtures("no_nvidia_smi")
def test_cuda_device_ids_follow_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, GPU-abc")
    assert (nvml_device(0), nvml_device(1)) == ("2", "GPU-abc")
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml({2: 40 * GIB, b"GPU-abc": 10 * GIB}))
    assert read_gpu_memory(0) == GpuUsage(used=40 * GIB, total=80 * GIB)
    assert read_gpu_memory(1) == GpuUsage(used=70 * GIB, total=80 * GIB)


def test_nvidia_smi_is_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    commands: list[list[str]] = []

    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        commands.append(command)
        return subprocess.CompletedProcess(command, 0, stdout="81559, 20480\n", stderr="")

    monkeypatch.setattr(gpu_memory.subprocess, "run", run)
    assert read_gpu_memory(1) == GpuUsage(used=(81559 - 20480) << 20, total=81559 << 20)
    assert commands[0][0] == "nvidia-smi"
    assert commands[0][-2:] == ["-i", "1"]


@pytest.mark.parametrize(
    "result",
    [
        subprocess.CompletedProcess([], 6, stdout="", stderr="No devices were found"),
        subprocess.CompletedProcess([], 0, stdout="[N/A], [N/A]\n", stderr=""),
    ],
)
def test_an_unreadable_gpu_reads_as_none(monkeypatch: pytest.MonkeyPatch, result: Any) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml({}))  # NVML knows no such GPU
    monkeypatch.setattr(gpu_memory.subprocess, "run", lambda command, **kwargs: result)
    assert read_gpu_memory(3) is None


def test_no_nvml_and_no_nvidia_smi_reads_as_none(
    monkeypatch: pytest.MonkeyPatch, no_nvidia_smi: list[list[str]]
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert read_gpu_memory(0) is None
    assert len(no_nvidia_smi) == 1
