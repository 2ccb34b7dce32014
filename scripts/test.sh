#!/usr/bin/env bash
# Sets up .venv with the test and lint tools, then runs the whole test suite, ruff and mypy.
# Arguments are passed to pytest (e.g. `scripts/test.sh tests/e2e -x`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
bash scripts/fetch_chromium.sh
.venv/bin/ruff check src tests benchmarks scripts deploy
.venv/bin/mypy
# The wheels the container image's replay installs (tests/deploy/test_images.py), built once into .venv/test-cache:
# later runs install from there without resolving against the package index.
PYTHONPATH=tests .venv/bin/python -m deploy.wheelhouse
# One worker per core; a module's tests stay on one worker, so its module-scoped servers start once.
.venv/bin/python -m pytest -n auto --dist loadfile "$@"
