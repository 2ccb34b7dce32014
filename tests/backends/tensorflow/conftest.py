"""Fixtures of the tensorflow backend's unit tests: models built once per session, copied into a repository
per test; configs completed as the server completes them; instances loaded as the server loads them."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from modelhost.backends.api import BackendContext
from modelhost.backends.model_config import load_model_config
from modelhost.backends.registry import backend_for

if TYPE_CHECKING:
    # Not imported here: the test modules import .models, whose TensorFlow check skips them cleanly.
    from .models import Builder

ModelFactory = Callable[..., Path]


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Builder, str], Path]:
    root = tmp_path_factory.mktemp("tf_models")

    def get(build: Builder, filename: str) -> Path:
        path = root / build.__name__ / filename
        if not path.exists():
            build(path)
        return path

    return get


@pytest.fixture
def make_model(tmp_path: Path, model_cache: Callable[[Builder, str], Path]) -> ModelFactory:
    """make_model(name, build, config=None, filename="model.savedmodel") -> the model's directory."""

    def make(
        name: str, build: Builder, config: str | None = None, filename: str = "model.savedmodel"
    ) -> Path:
        built = model_cache(build, filename)
        version_dir = tmp_path / name / "1"
        version_dir.mkdir(parents=True)
        if built.is_dir():
            shutil.copytree(built, version_dir / filename)
        else:
            shutil.copy2(built, version_dir / filename)
        if config is not None:
            (tmp_path / name / "config.pbtxt").write_text(config)
        return tmp_path / name

    return make


class Loaded:
    """A model version loaded as the server loads it: its completed config, and its instances."""

    def __init__(self, model_dir: Path, config: Any, instances: list[Any]) -> None:
        self.model_dir = model_dir
        self.config = config
        self.instances = instances

    def close(self) -> None:
        for instance in self.instances:
            instance.close()


def context(model_dir: Path, config: Any, **fields: Any) -> BackendContext:
    total = sum(group.count for group in config.instance_group)
    return BackendContext(
        model_name=config.name,
        version=1,
        model_dir=model_dir,
        version_dir=model_dir / "1",
        config=config,
        **{"total_instances": total, **fields},
    )


@pytest.fixture
def load() -> Iterator[Callable[..., Loaded]]:
    """load(model_dir, **context fields) -> Loaded; every instance is closed after the test."""
    opened: list[Loaded] = []

    def run(model_dir: Path, **fields: Any) -> Loaded:
        config = load_model_config(model_dir, gpu_count=fields.get("gpu_count", 0))
        ctx = context(model_dir, config, **fields)
        backend = backend_for(config)
        instances: list[Any] = []
        try:
            for group in config.instance_group:
                for index in range(group.count):
                    instances.append(backend.load_instance(ctx, group, index, 0))
        except BaseException:
            for instance in instances:
                instance.close()
            raise
        loaded = Loaded(model_dir, config, instances)
        opened.append(loaded)
        return loaded

    yield run
    for loaded in opened:
        loaded.close()
