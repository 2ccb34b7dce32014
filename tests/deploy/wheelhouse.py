"""A local wheelhouse for the CPU image's replay (tests/deploy/test_images.py): every wheel its venv step installs,
built once with this host's pip configuration, then reused by each replay with `--no-index`, so that a replay
neither resolves against the package index nor downloads anything.

    PYTHONPATH=tests python -m deploy.wheelhouse [EXTRAS]    builds it (scripts/test.sh does, before the tests)
                                                             and prints its path; EXTRAS: the CPU image's default

It is kept with what the tests build once (built_once.py), keyed by what decides its contents: pyproject.toml's
build requirements and dependencies, the extras and this Python's version. The first build on a machine downloads
and builds everything (minutes); later runs find it ready.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import built_once

ROOT = Path(__file__).resolve().parents[2]


def wheelhouse(extras: str) -> Path:
    """The wheelhouse for modelhost[extras] and its build requirements, built here if it is not ready."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    requires = project["build-system"]["requires"]
    place = built_once.folder(
        "wheelhouse",
        {
            "build": requires,
            "dependencies": project["project"]["dependencies"],
            "optional": project["project"]["optional-dependencies"],
            "extras": sorted(e for e in extras.split(",") if e),
            "python": sys.version_info[:2],
        },
    )
    if built_once.ready(place):
        return place
    target = f"{ROOT}[{extras}]" if extras else str(ROOT)
    with built_once.building(place) as build:
        # This host's pip configuration (find-links, extra indexes, constraints) decides, as it would for the
        # replay itself: the CPU torch comes from where it would.
        wheel = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(build), target, *requires]
        subprocess.run(wheel, check=True)
        for own in build.glob("modelhost-*.whl"):
            own.unlink()  # the replay builds modelhost from its copy of the tree, as the image does
    return place


def pip_environment(folder: Path) -> dict[str, str]:
    """The environment for a pip that installs from `folder` alone: no index, no configuration file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k == "PIP_CERT"}
    return {**env, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(folder), "PIP_CONFIG_FILE": os.devnull}


def image_extras() -> str:
    """The EXTRAS the CPU image installs by default, as deploy/docker/replay.py reads its Dockerfile."""
    spec = importlib.util.spec_from_file_location("modelhost_image_replay", ROOT / "deploy" / "docker" / "replay.py")
    assert spec is not None and spec.loader is not None
    replay = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = replay  # dataclasses look their module up
    spec.loader.exec_module(replay)
    image = replay.Image.load(ROOT / "deploy" / "docker" / "Dockerfile", {})
    return str(replay.stage_args(image.dockerfile, image.build_stage, {})["EXTRAS"])


if __name__ == "__main__":
    print(wheelhouse(sys.argv[1] if len(sys.argv) > 1 else image_extras()))
