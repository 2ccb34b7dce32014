"""The initial load: each model once, in dependency order (composing models before the ensembles using them)."""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path

import pytest

import modelhost
from modelhost.engine.registry.builder import VersionBuilder
from modelhost.engine.registry.entries import LoadSettings
from modelhost.engine.registry.registry import ModelRegistry
from modelhost.repository.sources import open_repository

EXAMPLES = Path(modelhost.__file__).parent / "examples"


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for name in ("simple", "simple_ensemble"):
        shutil.copytree(EXAMPLES / name, repo / name)
    # An ensemble of the ensemble: a third layer.
    outer = (EXAMPLES / "simple_ensemble" / "config.pbtxt").read_text()
    (repo / "outer").mkdir()
    (repo / "outer" / "1").mkdir()
    (repo / "outer" / "config.pbtxt").write_text(
        outer.replace('name: "simple_ensemble"', 'name: "outer"').replace(
            'model_name: "simple"', 'model_name: "simple_ensemble"'
        )
    )
    return repo


def _start(repo: Path) -> ModelRegistry:
    registry = ModelRegistry([open_repository(str(repo))], LoadSettings())

    async def run() -> None:
        await registry.start()

    asyncio.run(run())
    return registry


def _lines(caplog: pytest.LogCaptureFixture, words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if words in r.getMessage()]


def test_each_model_loads_once_and_composing_models_first(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="modelhost")
    registry = _start(_repo(tmp_path))
    try:
        loaded = _lines(caplog, "successfully loaded")
        order = [line.split("'")[1] for line in loaded]
        assert order == ["simple", "simple_ensemble", "outer"], loaded
        assert not _lines(caplog, "unloaded")
        assert registry.all_ready()
    finally:
        registry.close()


def test_a_composing_model_that_fails_is_tried_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="modelhost")
    repo = _repo(tmp_path)
    (repo / "simple" / "1" / "model.onnx").write_bytes(b"not an onnx model")
    registry = _start(repo)
    try:
        assert len(_lines(caplog, "failed to load 'simple' version 1")) == 1, caplog.text
        status = {model: state for model, _, state in registry.status_rows()}
        assert status["simple"].startswith("UNAVAILABLE"), status
        assert "contains models that are not available or ambiguous: simple" in status["simple_ensemble"], (
            status
        )
        assert "not available or ambiguous: simple_ensemble" in status["outer"], status
    finally:
        registry.close()


def test_a_fault_while_reading_a_config_fails_that_model_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug of ours in config reading (an auto-complete hook raising TypeError, say) must not end the server's
    start: that model fails to load, with the error, and the others serve."""
    caplog.set_level(logging.INFO, logger="modelhost")
    repo = tmp_path / "repo"
    for name in ("simple", "identity_fp32"):
        shutil.copytree(EXAMPLES / name, repo / name)
    read_config = VersionBuilder.read_config

    def faulty(self: VersionBuilder, model_dir: Path, override: object, name: str = "") -> object:
        if name == "identity_fp32":
            raise TypeError("can only concatenate str (not 'NoneType') to str")
        return read_config(self, model_dir, override, name)  # type: ignore[arg-type]

    monkeypatch.setattr(VersionBuilder, "read_config", faulty)
    registry = _start(repo)
    try:
        status = {model: state for model, _, state in registry.status_rows()}
        assert status["simple"] == "READY", status
        assert status["identity_fp32"].startswith("UNAVAILABLE"), status
        assert (
            "failed to read the configuration of model 'identity_fp32': TypeError(" in status["identity_fp32"]
        )
    finally:
        registry.close()
