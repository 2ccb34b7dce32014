"""Fixtures of the openvino backend's unit tests: a model repository, and loading a model's instances.

No `__init__.py` here: as a package this directory would be named `openvino` (tests/backends has none) and
shadow the real one. Model builders live in ov_test_models.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ov_test_models import Load, MakeModel, save
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.backends.api import BackendContext
from modelhost.backends.model_config import load_model_config
from modelhost.backends.openvino.backend import OpenVINOBackend
from modelhost.backends.openvino.instance import OpenVINOInstance


@pytest.fixture
def make_model(repo: Path) -> MakeModel:
    """make_model(name, model, config_text=None, filename="model.xml") -> the model directory, version 1."""

    def _make(name: str, model: Any, config_text: str | None = None, filename: str = "model.xml") -> Path:
        model_dir = repo / name
        save(model, model_dir / "1" / filename)
        if config_text is not None:
            (model_dir / "config.pbtxt").write_text(config_text)
        return model_dir

    return _make


def context(model_dir: Path, config: ModelConfig, total_instances: int = 1) -> BackendContext:
    return BackendContext(
        model_name=config.name,
        version=1,
        model_dir=model_dir,
        version_dir=model_dir / "1",
        config=config,
        total_instances=total_instances,
    )


@pytest.fixture
def load() -> Iterator[Load]:
    """load(model_dir, **load_model_config options) -> the first instance of the model's completed config;
    every instance loaded is closed after the test."""
    opened: list[OpenVINOInstance] = []

    def _load(model_dir: Path, **options: Any) -> OpenVINOInstance:
        config = load_model_config(model_dir, **options)
        instance = OpenVINOBackend().load_instance(context(model_dir, config), config.instance_group[0], 0, 0)
        opened.append(instance)
        return instance

    yield _load
    for instance in opened:
        instance.close()


@pytest.fixture
def backend() -> OpenVINOBackend:
    return OpenVINOBackend()


@pytest.fixture
def ctx_of() -> Callable[..., BackendContext]:
    """ctx_of(model_dir, config, total_instances=1) -> a BackendContext for version 1."""
    return context
