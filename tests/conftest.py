"""Fixtures shared by the unit tests (the end-to-end ones have their own in tests/e2e/conftest.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest


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
