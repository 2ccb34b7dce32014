"""Fixtures of the PyTorch backend's unit tests: a model repository of TorchScript files, and instances loaded from
it in this process, as the server loads them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from modelhost.backends.api import BackendContext
from modelhost.backends.model_config import load_model_config
from modelhost.backends.pytorch.backend import PyTorchBackend
from modelhost.backends.pytorch.threads import PROCESS_THREADS

from .torch_test_models import save

ModelFactory = Callable[..., Path]
Loader = Callable[..., Any]


def config_text(
    inputs: str, outputs: str, *, max_batch_size: int = 0, extra: str = "", platform: str = "pytorch_libtorch"
) -> str:
    return f"""
platform: "{platform}"
max_batch_size: {max_batch_size}
input [ {inputs} ]
output [ {outputs} ]
instance_group [ {{ kind: KIND_CPU }} ]
{extra}
"""


def tensor(name: str, data_type: str = "TYPE_FP32", dims: str = "[ 4 ]", more: str = "") -> str:
    return f'{{ name: "{name}" data_type: {data_type} dims: {dims} {more} }}'


@pytest.fixture
def make_model(repo: Path) -> ModelFactory:
    """make_model(name, module, config, filename="model.pt") -> the model directory (version 1)."""

    def _make(
        name: str, module: torch.jit.ScriptModule | None, config: str, filename: str = "model.pt"
    ) -> Path:
        model_dir = repo / name
        (model_dir / "1").mkdir(parents=True)
        if module is not None:
            save(module, model_dir / "1" / filename)
        (model_dir / "config.pbtxt").write_text(config)
        return model_dir

    return _make


def context(
    model_dir: Path, *, gpu_count: int = 0, total_instances: int = 1, auto_complete: bool = False
) -> BackendContext:
    config = load_model_config(model_dir, auto_complete=auto_complete, gpu_count=gpu_count)
    return BackendContext(
        model_name=model_dir.name,
        version=1,
        model_dir=model_dir,
        version_dir=model_dir / "1",
        config=config,
        total_instances=total_instances,
        gpu_count=gpu_count,
    )


@pytest.fixture
def load_instance() -> Iterator[Loader]:
    """load_instance(model_dir, index=0, ctx=None) -> an instance of the model's first instance group; all closed
    at the end of the test."""
    loaded: list[Any] = []

    def _load(model_dir: Path, index: int = 0, ctx: BackendContext | None = None) -> Any:
        ctx = ctx or context(model_dir)
        instance = PyTorchBackend().load_instance(ctx, ctx.config.instance_group[0], index, 0)
        loaded.append(instance)
        return instance

    yield _load
    for instance in loaded:
        instance.close()


@pytest.fixture(autouse=True)
def fresh_thread_counts() -> Iterator[None]:
    """Each test starts with no model having set the process-global thread counts, and leaves none set."""
    threads = torch.get_num_threads()
    PROCESS_THREADS.reset()
    yield
    PROCESS_THREADS.reset()
    torch.set_num_threads(threads)


def fp32(*rows: list[float]) -> np.ndarray:
    return np.array(rows, dtype=np.float32)
