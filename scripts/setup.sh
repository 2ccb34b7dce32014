#!/usr/bin/env bash
# Creates .venv with modelhost installed (editable) and the extras named in $1 (e.g. "test" or "dev").
# Safe to run again: it only installs what is missing. Needs Python 3.11+ and network access to PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1:-}
PYTHON=${PYTHON:-python3}

if [[ ! -x .venv/bin/python ]]; then
  if ! "$PYTHON" -m venv .venv 2>/dev/null; then
    # Debian splits venv out of the interpreter package.
    if command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
      apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
      rm -rf .venv && "$PYTHON" -m venv .venv
    else
      echo "setup: '$PYTHON -m venv' failed; install the python3-venv package" >&2
      exit 1
    fi
  fi
fi
.venv/bin/python -m pip install -q --upgrade pip
if [[ -n $extras ]]; then
  .venv/bin/python -m pip install -q -e ".[$extras]"
else
  .venv/bin/python -m pip install -q -e .
fi
