"""Fake engines and a fake TensorRT runtime, so that the TensorRT backend's logic runs without TensorRT or a GPU.

(A plain module, not a conftest: this directory has no __init__.py, since a test package named `tensorrt` would
shadow the real package.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from modelhost.backends.api import Arrays, BackendContext
from modelhost.backends.tensorrt.engine import EngineDescription, EngineTensor, ProfileShapes, Shape
from modelhost.backends.tensorrt.loader import autocomplete_plan
from modelhost.backends.tensorrt.runtime import PlanLoadError
from modelhost.backends.tensorrt.settings import TensorRTSettings
from modelhost.host.gpu_memory import GpuMemory


def dynamic_input(
    name: str, shape: Shape, *profiles: tuple[Shape, Shape, Shape], trt_type: str = "FLOAT"
) -> EngineTensor:
    """An input with -1 dims and one (min, opt, max) per profile."""
    return EngineTensor(name, True, trt_type, shape, tuple(ProfileShapes(*p) for p in profiles))


def static_input(name: str, shape: Shape, num_profiles: int = 1, trt_type: str = "FLOAT") -> EngineTensor:
    return EngineTensor(
        name, True, trt_type, shape, tuple(ProfileShapes(shape, shape, shape) for _ in range(num_profiles))
    )


def output(name: str, shape: Shape, trt_type: str = "FLOAT") -> EngineTensor:
    return EngineTensor(name, False, trt_type, shape)


def engine(*tensors: EngineTensor, num_profiles: int = 1) -> EngineDescription:
    return EngineDescription(tuple(tensors), num_profiles, "10.3.0")


def batch_engine(max_batch: int = 8, num_profiles: int = 1) -> EngineDescription:
    """x [-1,3] -> y [-1,2], every profile taking batches 1..max_batch."""
    profiles = [((1, 3), (max_batch, 3), (max_batch, 3))] * num_profiles
    return engine(dynamic_input("x", (-1, 3), *profiles), output("y", (-1, 2)), num_profiles=num_profiles)


def config(text: str = "", name: str = "trt") -> ModelConfig:
    parsed = ModelConfig()
    text_format.Parse(text, parsed)
    parsed.name = parsed.name or name
    parsed.platform = parsed.platform or "tensorrt_plan"
    parsed.backend = parsed.backend or "tensorrt"
    return parsed


def gpu_config(text: str = "", name: str = "trt") -> ModelConfig:
    """A config with one KIND_GPU instance group on GPU 0 (what normalisation gives on a GPU host)."""
    parsed = config(text, name)
    if not parsed.instance_group:
        parsed.instance_group.add(name=name, kind=ModelInstanceGroup.KIND_GPU, count=1, gpus=[0])
    return parsed


def context(
    model_dir: Path,
    cfg: ModelConfig,
    *,
    gpu_count: int = 1,
    backend_config: dict[str, str] | None = None,
    gpu_memory: GpuMemory | None = None,
) -> BackendContext:
    return BackendContext(
        model_name=cfg.name,
        version=1,
        model_dir=model_dir,
        version_dir=model_dir / "1",
        config=cfg,
        backend_config=backend_config or {},
        gpu_count=gpu_count,
        gpu_memory=gpu_memory or GpuMemory(),
    )


def write_plan(
    model_dir: Path, version: int = 1, filename: str = "model.plan", data: bytes = b"plan"
) -> Path:
    path = model_dir / str(version) / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@dataclass
class FakeExecutor:
    """Answers every requested output with zeros of its engine shape, batch dimension from the first input."""

    engine: EngineDescription
    profiles: list[int]
    settings: TensorRTSettings
    device_id: int
    max_batch_size: int
    runs: list[tuple[int, dict[str, tuple[int, ...]]]] = field(default_factory=list)
    closed: bool = False
    fail_with: Exception | None = None

    def run(self, profile: int, inputs: Arrays, output_names: Sequence[str]) -> Arrays:
        if self.fail_with is not None:
            raise self.fail_with
        self.runs.append((profile, {name: tuple(a.shape) for name, a in inputs.items()}))
        batch = next(iter(inputs.values())).shape[0]
        out: Arrays = {}
        for name in output_names:
            tensor = self.engine.tensor(name)
            assert tensor is not None
            shape = tuple(batch if d == -1 else d for d in tensor.shape)
            out[name] = np.zeros(shape, dtype=np.float32)
        return out

    def close(self) -> None:
        self.closed = True


class FakeLoadedEngine:
    def __init__(self, description: EngineDescription) -> None:
        self._description = description
        self.executors: list[FakeExecutor] = []

    @property
    def description(self) -> EngineDescription:
        return self._description

    def create_executor(
        self, profiles: Sequence[int], settings: TensorRTSettings, device_id: int, max_batch_size: int
    ) -> FakeExecutor:
        executor = FakeExecutor(self._description, list(profiles), settings, device_id, max_batch_size)
        self.executors.append(executor)
        return executor


@dataclass
class FakeRuntime:
    """An EngineRuntime whose plans are descriptions: `engines[plan bytes]`, or PlanLoadError(`errors`)."""

    engines: dict[bytes, EngineDescription] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    devices: int = 1
    capability: str = "8.6"
    version: str = "10.3.0"
    deserialized: list[tuple[bytes, int, bool]] = field(default_factory=list)
    plugins: list[str] = field(default_factory=list)
    loaded: list[FakeLoadedEngine] = field(default_factory=list)

    def device_count(self) -> int:
        return self.devices

    def compute_capability(self, device_id: int) -> str:
        return self.capability

    def load_plugins(self, paths: Sequence[str]) -> None:
        self.plugins.extend(paths)

    def deserialize(self, plan: bytes, device_id: int, *, version_compatible: bool) -> FakeLoadedEngine:
        self.deserialized.append((plan, device_id, version_compatible))
        if plan not in self.engines:
            raise PlanLoadError(self.errors)
        loaded = FakeLoadedEngine(self.engines[plan])
        self.loaded.append(loaded)
        return loaded


# The runtime the FakeTensorRTBackend below uses; tests set its engines.
FAKE_RUNTIME = FakeRuntime()


class FakeTensorRTBackend:
    """The TensorRT backend's auto-complete hook on FAKE_RUNTIME, for running the whole config pipeline."""

    name = "tensorrt"

    @staticmethod
    def autocomplete(
        config: Any, model_dir: Path, *, default_max_batch_size: int, settings: Mapping[str, str]
    ) -> None:
        autocomplete_plan(config, model_dir, FAKE_RUNTIME)
