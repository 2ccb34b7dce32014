"""The `runtime` fixture: a FakeRuntime installed in pb_utils for the test, removed after it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backends.python.pb_utils.fake_runtime import FakeRuntime
from modelhost.backends.python.pb_utils.runtime import set_runtime


@pytest.fixture
def runtime() -> Iterator[FakeRuntime]:
    fake = FakeRuntime()
    set_runtime(fake)
    try:
        yield fake
    finally:
        set_runtime(None)
