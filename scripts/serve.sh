#!/usr/bin/env bash
# Sets up .venv and starts the server; with no arguments it serves the bundled example repository on
# ports 8000 (HTTP), 8001 (gRPC) and 8002 (metrics). Arguments are passed to `modelhost serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/modelhost serve "$@"
