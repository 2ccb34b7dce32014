"""ensembles.py: steps read from config files, cycles, the order of loads, and the dependents of a model."""

from __future__ import annotations

from pathlib import Path

from engine.registry.registry_fakes import ensemble, entry, model
from modelhost.engine.registry.catalog import steps_in_files
from modelhost.engine.registry.ensembles import dependency_layers, dependents, ensemble_cycle
from modelhost.engine.registry.entries import ModelState

GRAPH = {"top": ["mid", "a"], "mid": ["a", "b"], "a": [], "b": []}


def test_layers_load_what_an_ensemble_names_before_it() -> None:
    assert dependency_layers(["top", "mid", "a", "b"], GRAPH.__getitem__) == [["a", "b"], ["mid"], ["top"]]


def test_a_cycle_is_loaded_last_and_named() -> None:
    graph = {"x": ["y"], "y": ["x"], "z": []}
    assert dependency_layers(["x", "y", "z"], graph.__getitem__) == [["z"], ["x", "y"]]
    assert ensemble_cycle("x", ensemble("x", "y"), graph.__getitem__) == ["x", "y", "x"]
    assert ensemble_cycle("top", ensemble("top", "mid", "a"), GRAPH.__getitem__) == []


def test_steps_come_from_the_config_file_alone(tmp_path: Path) -> None:
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "config.pbtxt").write_text(str(ensemble("e", "a", "b")))
    assert steps_in_files([tmp_path / "e"], "e", None) == ["a", "b"]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.pbtxt").write_text("not a config {")
    assert steps_in_files([tmp_path / "bad"], "bad", None) == []  # its own load reports it
    assert steps_in_files([], "gone", None) == []


def test_dependents_are_the_loaded_ensembles_above_a_model() -> None:
    ready = (1, ModelState.READY, model())
    entries = [
        entry("a", ready),
        entry("mid", ready, cfg=ensemble("mid", "a")),
        entry("top", ready, cfg=ensemble("top", "mid")),
        entry("idle", (1, ModelState.UNAVAILABLE, None), cfg=ensemble("idle", "a")),
    ]
    assert sorted(dependents("a", entries)) == ["mid", "top"]
    assert dependents("top", entries) == []
