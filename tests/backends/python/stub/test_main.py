"""`python -m modelhost.backends.python.stub`: a stub process, spawned as the server spawns it, whose model imports
`triton_python_backend_utils` (the pb_utils package, under Triton's module name)."""

from __future__ import annotations

import os
from pathlib import Path

from modelhost.backends.python.process import StubSettings, exchange, spawn_stub

MODEL = '''
import triton_python_backend_utils as pb_utils
from triton_python_backend_utils import Tensor


class TritonPythonModel:
    def initialize(self, args):
        assert Tensor is pb_utils.Tensor and pb_utils.__name__ == "modelhost.backends.python.pb_utils"
'''


def test_a_stub_process_runs_a_model_that_imports_pb_utils(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(MODEL)
    settings = StubSettings(shm_region_prefix_name=f"mhtest_main_{os.getpid()}_")
    process, sock, _ = spawn_stub(settings, 1)
    try:
        reply = exchange(
            sock,
            process,
            {
                "op": "init",
                "args": {"model_name": "m", "model_instance_name": "m_0"},
                "model_file": str(tmp_path / "model.py"),
                "decoupled": False,
            },
            "init_done",
            30,
            "the test's stub",
            unbounded_after="initializing",
        )
        assert reply == {"op": "init_done", "error": None, "has_is_ready": False}
    finally:
        sock.close()  # the stub ends when its socket closes
        assert process.wait(30) == 0
