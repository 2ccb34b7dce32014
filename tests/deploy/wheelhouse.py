"""A local wheelhouse for the CPU image's replay (tests/deploy/test_images.py): every wheel its venv step installs,
built once with this host's pip configuration, then reused by each replay with `--no-index`, so that a replay
neither resolves against the package index nor downloads anything.

    python tests/deploy/wheelhouse.py [EXTRAS]   builds it (scripts/test.sh does, before the tests) and prints
                                                 its path; EXTRAS: the CPU Dockerfile's default

The wheelhouse is keyed by what decides its contents: pyproject.toml's build requirements and dependencies, the
extras and this Python's version. A change to any of them builds a new one beside it (one that no run used for a
week is removed then); the first build on a machine downloads and builds everything (minutes), later runs find
it ready. Its place: under .venv (one per virtual environment, which scripts/setup.sh makes), or
$MODELHOST_WHEELHOUSE.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READY = "ready"  # written last: a wheelhouse without it was cut short and is built again
UNUSED_S = 7 * 24 * 3600  # a wheelhouse no run used for a week (an older pyproject.toml's) is removed


def root() -> Path:
    given = os.environ.get("MODELHOST_WHEELHOUSE")
    return Path(given) if given else ROOT / ".venv" / "wheelhouse"


def key(extras: str) -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    inputs = {
        "build": project["build-system"]["requires"],
        "dependencies": project["project"]["dependencies"],
        "optional": project["project"]["optional-dependencies"],
        "extras": sorted(e for e in extras.split(",") if e),
        "python": sys.version_info[:2],
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def wheelhouse(extras: str) -> Path:
    """The wheelhouse for modelhost[extras] and its build requirements, built here if it is not ready."""
    folder = root() / key(extras)
    if (folder / READY).is_file():
        (folder / READY).touch()
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
        target = f"{ROOT}[{extras}]" if extras else str(ROOT)
        # This host's pip configuration (find-links, extra indexes, constraints) decides, as it would for the
        # replay itself: the CPU torch comes from where it would.
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(build), target, *requires],
            check=True,
        )
        for own in build.glob("modelhost-*.whl"):
            own.unlink()  # the replay builds modelhost from its copy of the tree, as the image does
        (build / READY).write_text(json.dumps({"extras": extras}) + "\n")
        for old in folder.parent.iterdir():
            if not old.name.startswith(".") and _unused(old):
                shutil.rmtree(old, ignore_errors=True)
        try:
            build.rename(folder)
        except OSError:  # another run built it meanwhile
            if not (folder / READY).is_file():
                raise
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return folder


def _unused(folder: Path) -> bool:
    try:
        return time.time() - (folder / READY).stat().st_mtime > UNUSED_S
    except OSError:
        return True


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
