"""The control client of a perf run."""

from __future__ import annotations

import pytest

from modelhost.perf.client import PerfError, split_url


def test_split_url() -> None:
    assert split_url("localhost:9000", 8000) == ("localhost", 9000)
    assert split_url("http://host", 8000) == ("host", 8000)
    with pytest.raises(PerfError):
        split_url("host:port", 8000)
