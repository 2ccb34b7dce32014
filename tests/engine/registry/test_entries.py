"""entries.py: the version policy, and which versions of an entry serve."""

from __future__ import annotations

from engine.registry.registry_fakes import config, entry, model
from modelhost.engine.registry.entries import ModelState, select_versions


def test_the_version_policy_picks_versions() -> None:
    available = [1, 2, 3, 5]
    assert select_versions(config(), available) == [5]  # Triton's default: the latest one
    assert select_versions(config("version_policy { latest { num_versions: 2 } }"), available) == [3, 5]
    assert select_versions(config("version_policy { all {} }"), available) == available
    assert select_versions(config("version_policy { specific { versions: [3, 1] } }"), available) == [1, 3]


def test_only_ready_versions_with_a_model_serve() -> None:
    e = entry(
        "m",
        (1, ModelState.READY, model()),
        (2, ModelState.LOADING, None),
        (3, ModelState.UNLOADING, model()),
        (4, ModelState.READY, None),
    )
    assert e.serving_versions() == [1]
