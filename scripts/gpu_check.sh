#!/usr/bin/env bash
# The GPU check, in one call on a machine with an NVIDIA GPU (scripts/gpu_check.py says what it runs).
#
# Here, once, with network access:   bash scripts/gpu_check_prepare.sh      (fills .gpu_check, ~21 MiB)
# There, through the device tool:    run(command="bash scripts/gpu_check.sh --out $OUT", carry=[".gpu_check"],
#                                        timeout_s=540)
# Anywhere, to see the plan:         bash scripts/gpu_check.sh --dry-run
#
# The summary is $OUT/summary.md (and summary.json), with the test and benchmark logs beside it. Options are
# scripts/gpu_check.py's (--budget-s, default 480; --prepared; --python).
set -uo pipefail
cd "$(dirname "$0")/.."
# The GPU machine's python3 is the one with torch; here (a dry run) the project's own will do.
python=python3
if [[ " $* " == *" --dry-run "* && -x .venv/bin/python ]]; then
  python=.venv/bin/python
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" scripts/gpu_check.py --python "$(command -v "$python" || echo "$python")" "$@"
