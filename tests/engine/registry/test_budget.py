"""budget.py: bytes in use, what unloading gives back, whether a load fits, least recently used first."""

from __future__ import annotations

import pytest

from engine.registry.registry_fakes import entry, model
from modelhost.engine.registry.budget import check_fits, last_used_ms, memory_in_use, serving_bytes
from modelhost.engine.registry.entries import ModelState
from modelhost.errors import OutOfMemory


def test_memory_counts_every_version_held_and_serving_bytes_only_those_serving() -> None:
    a = entry("a", (1, ModelState.READY, model(100)), (2, ModelState.UNLOADING, model(30)))
    b = entry("b", (1, ModelState.READY, model(50)))
    assert memory_in_use([a, b]) == 180
    assert memory_in_use([a, b], besides="a") == 50
    assert serving_bytes([a, b]) == 150  # a closing version's memory is not given back by unloading its model


def test_a_load_that_does_not_fit_says_why() -> None:
    check_fits("m", 1, 40, "takes", kept=60, budget=100)
    with pytest.raises(OutOfMemory) as refused:
        check_fits("m", 2, 41, "needs at least", kept=60, budget=100)
    assert str(refused.value).startswith(
        "model 'm' version 2 needs at least 41 bytes of memory and does not fit in --model-memory-budget=100: "
        "60 bytes are taken"
    )


def test_least_recently_used_is_the_last_request_or_the_load() -> None:
    used = entry("used", (1, ModelState.READY, model(last_ms=500, loaded_ms=100)))
    fresh = entry("fresh", (1, ModelState.READY, model(last_ms=0, loaded_ms=900)))
    idle = entry("idle", (1, ModelState.READY, model(last_ms=0, loaded_ms=200)))
    assert min([used, fresh, idle], key=last_used_ms).name == "idle"
    assert last_used_ms(entry("none")) == 0
