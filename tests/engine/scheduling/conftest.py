"""Fixtures of the scheduling tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.fixture
def hooks(monkeypatch: pytest.MonkeyPatch) -> Callable[[int, int], None]:
    def set_hooks(queued: int, backlog: int = 0) -> None:
        monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", str(queued))
        monkeypatch.setenv("TRITONSERVER_BACKLOG_DELAY_SCHEDULER", str(backlog))

    return set_hooks
