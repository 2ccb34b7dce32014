"""views.py: the repository index rows (Triton's fields; memory under a budget) and the startup tables."""

from __future__ import annotations

from pathlib import Path

from engine.registry.registry_fakes import config, ensemble, entry, model
from modelhost.engine.registry.entries import ModelState
from modelhost.engine.registry.views import backend_rows, index_rows, status_rows

REPO = Path("/repo")


def test_index_rows() -> None:
    models = {
        "a": entry("a", (1, ModelState.READY, model(64)), (2, ModelState.UNAVAILABLE, None)),
        "bad": entry("bad", error="failed to parse the config"),
        "gone": entry("gone", (1, ModelState.UNAVAILABLE, None)),  # unloaded and no longer in the repository
    }
    models["a"].versions[2].reason = "unloaded"
    scanned = {"a": [REPO / "a"], "bad": [REPO / "bad"], "new": [REPO / "new"]}
    rows = index_rows(models, scanned, False, with_memory=False)
    assert rows == [
        {"name": "a", "version": "1", "state": "READY"},
        {"name": "a", "version": "2", "state": "UNAVAILABLE", "reason": "unloaded"},
        {"name": "bad", "state": "UNAVAILABLE", "reason": "failed to parse the config"},
        {"name": "new"},
    ]
    assert index_rows(models, scanned, True, with_memory=True) == [
        {"name": "a", "version": "1", "state": "READY", "memory_bytes": 64}
    ]
    assert status_rows(rows) == [
        ("a", "1", "READY"),
        ("a", "2", "UNAVAILABLE: unloaded"),
        ("bad", "-", "UNAVAILABLE: failed to parse the config"),
    ]


def test_backend_rows_name_each_backend_of_a_serving_model_once() -> None:
    ready = (1, ModelState.READY, model())
    entries = [
        entry("x", ready, cfg=config('backend: "onnxruntime"', "x")),
        entry("y", ready, cfg=config('backend: "onnxruntime"', "y")),
        entry("e", ready, cfg=ensemble("e", "x")),
        entry("off", (1, ModelState.UNAVAILABLE, None), cfg=config('backend: "python"', "off")),
    ]
    rows = backend_rows(entries, lambda name: {"threads": "2"} if name == "onnxruntime" else {})
    assert rows == [("onnxruntime", rows[0][1], '{"cmdline": {"threads": "2"}}')]
