#!/usr/bin/env bash
# Starts the server; with no arguments it serves the bundled example repository on ports 8000 (HTTP),
# 8001 (gRPC) and 8002 (metrics). Arguments are passed to `modelhost serve`.
# The first run sets up .venv, with the CPU backends' frameworks (PyTorch, OpenVINO, XGBoost/LightGBM/Treelite)
# since the bundled examples include a model for each; later runs start the server at once.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh torch,openvino,fil
exec .venv/bin/modelhost serve "$@"
