"""scripts/setup.sh installs once: a second run with the same pyproject.toml and extras returns without pip."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _setup_state() -> ModuleType:
    spec = importlib.util.spec_from_file_location("setup_state", ROOT / "scripts" / "setup_state.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_extras_are_compared_by_what_they_pull_in() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    closure = _setup_state().extras_closure(pyproject, "dev")
    assert {"dev", "test", "torch", "openvino", "fil"} <= closure
    assert _setup_state().extras_closure(pyproject, "") == set()
    with pytest.raises(SystemExit, match="no extra named 'nope'"):
        _setup_state().extras_closure(pyproject, "torch,nope")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the scripts and pyproject.toml, with a .venv whose `python` only records how it was called."""
    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "scripts", root / "scripts")
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    fake = bin_dir / "python"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {root / "calls"}\n')
    fake.chmod(0o755)
    return root


def _setup(root: Path, extras: str) -> list[str]:
    """Run setup.sh; the fake python's calls (pip installs) it made."""
    calls = root / "calls"
    calls.unlink(missing_ok=True)
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(
        ["bash", "scripts/setup.sh", extras], cwd=root, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return calls.read_text().splitlines() if calls.exists() else []


def test_a_second_run_installs_nothing(checkout: Path) -> None:
    first = _setup(checkout, "dev")
    assert any("install -e .[dev]" in call for call in first), first
    assert _setup(checkout, "dev") == []
    assert _setup(checkout, "torch,openvino,fil") == []  # what scripts/serve.sh asks: included in dev


def test_new_extras_or_a_changed_pyproject_install_again(checkout: Path) -> None:
    _setup(checkout, "torch")
    assert any("install -e .[fil]" in call for call in _setup(checkout, "fil"))
    assert _setup(checkout, "torch") == []
    pyproject = checkout / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n# changed\n")
    assert any("install -e .[torch]" in call for call in _setup(checkout, "torch"))
    assert _setup(checkout, "torch") == []
    assert _setup(checkout, "fil") != []  # installed for the old pyproject.toml only


def test_a_failed_install_shows_its_log_and_records_nothing(checkout: Path) -> None:
    fake = checkout / ".venv" / "bin" / "python"
    fake.write_text('#!/bin/sh\necho "ERROR: no matching distribution" >&2\nexit 1\n')
    result = subprocess.run(
        ["bash", "scripts/setup.sh", "dev"],
        cwd=checkout,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "no matching distribution" in result.stderr and ".venv/setup.log" in result.stderr
    assert not (checkout / ".venv" / "modelhost-setup.json").exists()
