"""A stub as the server holds it: messages to it carry the free list of its blocks; a stub gone refuses them."""

from __future__ import annotations

import pytest

from backends.python.stub_side import stub_without_process, written
from modelhost.backends.python.process import StubFailed, StubSettings


def test_a_message_carries_the_blocks_given_back() -> None:
    with stub_without_process() as (stub, _):
        stub.frees.extend([("seg", 64), ("seg", 128)])
        stub.send({"op": "cancel", "key": 3})
        stub.send({"op": "free"})
        assert written(stub) == [{"op": "cancel", "key": 3, "free": [("seg", 64), ("seg", 128)]}, {"op": "free"}]
        assert stub.frees == []


def test_a_stub_that_is_gone_refuses_messages() -> None:
    with stub_without_process() as (stub, _):
        stub.transport.closing = True  # type: ignore[union-attr]
        with pytest.raises(StubFailed, match=r"^the stub process of model instance 'm_0' is not running$"):
            stub.send({"op": "free"})
        stub.transport = None
        with pytest.raises(StubFailed):
            stub.send({"op": "free"})


def test_settings_take_tritons_names() -> None:
    settings = StubSettings.from_backend_config(
        {"shm-default-byte-size": "2048", "stub-timeout-seconds": "5", "shm-region-prefix-name": "p_"}
    )
    assert (settings.shm_default_byte_size, settings.shm_growth_byte_size) == (2048, 1 << 20)
    assert (settings.stub_timeout_seconds, settings.shm_region_prefix_name) == (5, "p_")
