"""Fixtures of the cli tests."""

from __future__ import annotations

import pytest

from cli.fake_app import FakeApp


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> FakeApp:
    return FakeApp(monkeypatch)
