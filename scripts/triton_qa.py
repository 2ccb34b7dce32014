#!/usr/bin/env python3
"""Run Triton's own qa suites against modelhost, on CPU.

For each suite (qa/L0_* of Triton's repository at v2.51.0) it does what the suite's test.sh does, with modelhost
in place of tritonserver: builds the model repository (qa/common's generators for the ONNX and libtorch kinds,
the suite's python models, python stand-ins for Triton's C++ test backends), starts the server with the
suite's flags, runs the suite's python tests with tritonclient, stops the server after each configuration, and
writes a summary (summary.md, summary.json) under --out.

    git clone --depth 1 --branch v2.51.0 https://github.com/triton-inference-server/server /tmp/triton
    .venv/bin/python scripts/triton_qa.py --triton /tmp/triton --out /tmp/triton-qa [--suites L0_infer,...]

A development and release tool: it needs the checkout, ports 8000-8002 free, and minutes per suite; it is not
part of the test suite. The recipes are in scripts/triton_qa/suites/, one module per suite.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from triton_qa.cli import main

if __name__ == "__main__":
    sys.exit(main())
