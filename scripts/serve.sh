#!/usr/bin/env bash
# Sets up .venv and starts the server; with no arguments it serves the bundled example repository on
# ports 8000 (HTTP), 8001 (gRPC) and 8002 (metrics). Arguments are passed to `modelhost serve`.
# It installs the CPU backends' frameworks (PyTorch, OpenVINO, XGBoost/LightGBM/Treelite) too, since the bundled
# examples include a model for each.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh torch,openvino,fil
exec .venv/bin/modelhost serve "$@"
