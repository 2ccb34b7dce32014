"""What the tests build once and keep across runs: the container replay's wheelhouse (deploy/wheelhouse.py), the
AOTInductor package of the PyTorch e2e tests. Each artifact is a folder named by a digest of what decides its
contents (versions, the source it is built from), so that a change builds a new one; the first run on a machine
builds it, later runs find it ready.

Its place: .venv/test-cache (one per virtual environment, which scripts/setup.sh makes), or $MODELHOST_TEST_CACHE.
A folder no run used for a week (one of an older key, or one a killed run left unfinished) is removed when a new
one is built beside it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READY = "ready"  # written last: a folder without it was cut short and is built again
UNUSED_S = 7 * 24 * 3600


def cache_root() -> Path:
    given = os.environ.get("MODELHOST_TEST_CACHE")
    return Path(given) if given else ROOT / ".venv" / "test-cache"


def folder(kind: str, inputs: object) -> Path:
    """Where the artifact of `kind` built from `inputs` (anything JSON can write) lies once it is built."""
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / kind / digest


def ready(place: Path) -> bool:
    """Whether the artifact is built (and marks it used now)."""
    marker = place / READY
    if not marker.is_file():
        return False
    marker.touch()
    return True


@contextlib.contextmanager
def building(place: Path) -> Iterator[Path]:
    """A fresh folder beside `place` to build into: it becomes `place` when the block ends without an error, whole
    or not at all (another run may have built it first), and is removed otherwise."""
    place.parent.mkdir(parents=True, exist_ok=True)
    built = Path(tempfile.mkdtemp(prefix=f".{place.name}-", dir=place.parent))
    try:
        yield built
        (built / READY).write_text("")
        for other in place.parent.iterdir():
            if other != built and _unused(other):
                shutil.rmtree(other, ignore_errors=True)
        try:
            built.rename(place)
        except OSError:
            if not (place / READY).is_file():
                raise
    finally:
        shutil.rmtree(built, ignore_errors=True)


def _unused(place: Path) -> bool:
    """A folder no run used for UNUSED_S, or one a run left unfinished (killed while building) as long ago."""
    try:
        used = (place / READY if (place / READY).exists() else place).stat().st_mtime
    except OSError:
        return False
    return time.time() - used > UNUSED_S
