"""Puts a real `redis-server` at .venv/tools/redis/redis-server, for the redis response cache's tests
(tests/e2e/test_redis_cache.py), and prints its path.

The one on the PATH when there is one; else Debian's own build, from the Debian archive (a package registry this
project may reach): `apt-get download` of redis-tools (whose multi-call binary is the server when called
`redis-server`, as Debian's redis-server package links it) and the two libraries it needs beyond a base system,
unpacked with `dpkg -x`, no installation and no root needed (but for `apt-get update` when the package lists are
missing). Does nothing when it is already there.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGES = ["redis-tools", "libjemalloc2", "liblzf1"]
TOOLS = Path(__file__).resolve().parent.parent / ".venv" / "tools" / "redis"
WRAPPER = TOOLS / "redis-server"


def _download(folder: Path) -> None:
    def download() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["apt-get", "download", *PACKAGES], cwd=folder, capture_output=True, text=True, check=False
        )

    result = download()
    if result.returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, check=False)
        result = download()
    if result.returncode != 0:
        raise SystemExit(f"fetch_redis: apt-get download {' '.join(PACKAGES)} failed:\n{result.stderr}")


def fetch() -> Path:
    on_path = shutil.which("redis-server")
    if on_path:
        return Path(on_path)
    if WRAPPER.exists():
        return WRAPPER
    if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
        raise SystemExit("fetch_redis: no redis-server on the PATH, and no apt-get to fetch Debian's")
    root = TOOLS / "root"
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        _download(Path(work))
        for deb in Path(work).glob("*.deb"):
            subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
    binary = root / "usr" / "bin" / "redis-server"
    if not binary.exists():
        binary.symlink_to("redis-check-rdb")  # one binary; it serves when called redis-server
    libraries = sorted({str(p.parent) for p in root.glob("usr/lib/*/lib*.so*")})
    WRAPPER.write_text(
        "#!/bin/sh\n"
        f'LD_LIBRARY_PATH="{":".join(libraries)}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" exec "{binary}" "$@"\n'
    )
    WRAPPER.chmod(0o755)
    version = subprocess.run([str(WRAPPER), "--version"], capture_output=True, text=True, check=False)
    if version.returncode != 0:
        raise SystemExit(f"fetch_redis: the unpacked redis-server does not run:\n{version.stderr}")
    return WRAPPER


if __name__ == "__main__":
    print(fetch())
    sys.exit(0)
