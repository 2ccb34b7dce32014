"""The PNG plots of `modelhost tune`, from a hand-made run (report_runs.py)."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

from modelhost.tune import plots
from tune.report_runs import make_results


def test_write_pngs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    directory = tmp_path / "plots"
    notes = plots.write_pngs(directory, make_results())
    expected = [directory / "throughput_vs_p99.png", directory / "latency_breakdown.png"]
    assert notes == [f"Wrote {path}" for path in expected]
    for path in expected:
        assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_write_pngs_of_an_empty_run(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    notes = plots.write_pngs(tmp_path, make_results(measured=[]))
    assert len(notes) == 2
    assert (tmp_path / "latency_breakdown.png").read_bytes().startswith(b"\x89PNG")


def test_write_pngs_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def import_module(name: str, package: str | None = None) -> ModuleType:
        if name.split(".")[0] == "matplotlib":
            raise ImportError(f"No module named {name!r}")
        return real(name, package)

    monkeypatch.setattr("modelhost.tune.plots.importlib.import_module", import_module)
    directory = tmp_path / "plots"
    notes = plots.write_pngs(directory, make_results())
    assert len(notes) == 1
    assert "not written" in notes[0] and "pip install 'modelhost[plot]'" in notes[0]
    assert not directory.exists()
