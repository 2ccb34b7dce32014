"""Fixtures of the FIL backend's unit tests: a model repository in tmp_path, and instances loaded from it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import lightgbm as lgb
import pytest
import xgboost as xgb
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.backends.api import BackendContext
from modelhost.backends.fil.backend import FilBackend, FilInstance
from modelhost.backends.model_config import load_model_config

from .fil_models import MODEL_FILES, save

Booster = xgb.Booster | lgb.Booster
MakeModel = Callable[..., Path]
LoadInstance = Callable[..., FilInstance]


@pytest.fixture
def make_model(repo: Path) -> MakeModel:
    """make_model(name, booster, model_type, config_text, filename=None) -> the model directory."""

    def _make(name: str, booster: Booster, model_type: str, config: str, filename: str | None = None) -> Path:
        model_dir = repo / name
        save(booster, model_dir / "1" / (filename or MODEL_FILES[model_type]), model_type)
        (model_dir / "config.pbtxt").write_text(config)
        return model_dir

    return _make


def context(model_dir: Path, config: ModelConfig, **kwargs: object) -> BackendContext:
    return BackendContext(model_dir.name, 1, model_dir, model_dir / "1", config, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def load_instance() -> Iterator[LoadInstance]:
    """load_instance(model_dir, auto_complete=True, **context) -> a loaded instance (closed after the test)."""
    loaded: list[FilInstance] = []

    def _load(model_dir: Path, auto_complete: bool = True, **kwargs: object) -> FilInstance:
        config = load_model_config(model_dir, auto_complete=auto_complete)
        instance = FilBackend().load_instance(
            context(model_dir, config, **kwargs), config.instance_group[0], 0, 0
        )
        loaded.append(instance)
        return instance

    yield _load
    for instance in loaded:
        instance.close()
