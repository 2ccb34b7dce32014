#!/usr/bin/env bash
# Creates .venv with modelhost installed (editable) and the extras named in $1 (e.g. "test" or "dev").
# Installs once: when .venv already has those extras for this pyproject.toml (scripts/setup_state.py keeps
# track), it returns at once, without the package index. Source changes need no reinstall (editable install);
# a changed pyproject.toml does. pip's output goes to .venv/setup.log, shown only when the install fails.
# Needs Python 3.11+ and, the first time, network access to PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1:-}
PYTHON=${PYTHON:-python3}

if [[ -x .venv/bin/python ]] && "$PYTHON" scripts/setup_state.py check "$extras"; then
  exit 0
fi
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
target=.${extras:+[$extras]}
echo "setup: installing modelhost${extras:+[$extras]} into .venv (once; the first time takes minutes)" >&2
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_WARN_SCRIPT_LOCATION=1
if ! { .venv/bin/python -m pip install --upgrade pip && .venv/bin/python -m pip install -e "$target"; } \
  >.venv/setup.log 2>&1; then
  tail -n 40 .venv/setup.log >&2
  echo "setup: the install failed; the whole log is in .venv/setup.log" >&2
  exit 1
fi
"$PYTHON" scripts/setup_state.py record "$extras"
