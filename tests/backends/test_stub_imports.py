"""A python model's stub process imports only what it needs: each of those modules is memory in every stub, and
a memory budget counts it (a package __init__ that pulled in the contract and grpc once cost 11 MiB a stub)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_stub_does_not_import_the_server() -> None:
    code = (
        "import json, sys, modelhost.backends.python.stub; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('grpc', 'modelhost')))))"
    )
    loaded = json.loads(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    )
    assert not [m for m in loaded if m == "grpc" or m.startswith("grpc.")]
    assert "modelhost.backends.api" not in loaded
    assert "modelhost.backends.registry" not in loaded
    assert "modelhost.engine.engine" not in loaded
