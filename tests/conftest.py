"""Fixtures shared by the unit tests (the end-to-end ones have their own in tests/e2e/conftest.py)."""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelhost.host.devices import gpu_count

# Set by scripts/gpu_check.sh: on the GPU machine a test marked `gpu` must run, never be skipped for want of one.
REQUIRE_GPU = os.environ.get("MODELHOST_REQUIRE_GPU") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `gpu` are skipped where no NVIDIA GPU is visible (one reason, one place)."""
    if gpu_count() > 0:
        return
    if REQUIRE_GPU and any(item.get_closest_marker("gpu") for item in items):
        pytest.exit(
            "MODELHOST_REQUIRE_GPU=1, and this host shows no NVIDIA GPU (modelhost.host.devices.gpu_count)",
            3,
        )
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU, and none is visible")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection left (every test module and what it imports: torch, TensorFlow, OpenVINO, Ray; some 700,000
    objects) lives as long as the run: it is moved out of the collector's reach. A full collection then looks at
    what the tests made alone, which e2e/conftest.py's collection after each test (0.4-0.6 s each otherwise, some
    900 s of a run on two workers) and Python's own full collections need."""
    gc.collect()
    gc.freeze()


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Tests that configure the `modelhost` logger (as `modelhost serve` does) leave it as they found it."""
    logger = logging.getLogger("modelhost")
    handlers, level, propagate = logger.handlers[:], logger.level, logger.propagate
    yield
    for handler in logger.handlers[:]:
        if handler not in handlers:
            logger.removeHandler(handler)
            handler.close()
    logger.setLevel(level)
    logger.propagate = propagate


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """An empty model repository directory (modules with a server of their own define their own `repo`)."""
    repository = tmp_path / "models"
    repository.mkdir()
    return repository
