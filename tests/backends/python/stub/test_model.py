"""The user's model in the stub: imported from its file, initialized (a coroutine too), auto-completed, asked
is_ready, finalized; failures worded as Triton words them."""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.python.stub.server_end import Identity, ServerEnd
from modelhost.backends.python.pb_utils.runtime import set_model_dir
from modelhost.backends.python.stub.connection import ServerGone

MODEL = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.set_max_batch_size(4)
        return config

    async def initialize(self, args):
        self.name = args["model_name"]
        self.directory = pb_utils.get_model_dir()

    def is_ready(self):
        return self.name == "m"

    def finalize(self):
        raise RuntimeError("finalize failed")
'''


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerEnd]:
    (tmp_path / "model.py").write_text(MODEL)
    monkeypatch.setattr(sys, "path", [*sys.path])  # the stub puts the model's directory first
    monkeypatch.setitem(sys.modules, "model", types.ModuleType("model"))
    end = ServerEnd(Identity())
    end.stub.runner.initialized = False
    try:
        yield end
    finally:
        end.close()
        set_model_dir(None)


def test_the_model_is_loaded_initialized_asked_and_finalized(server: ServerEnd, tmp_path: Path) -> None:
    init = {"model_name": "m", "model_instance_name": "m_0"}
    server.stub.connection.handle(
        {"op": "init", "args": init, "model_file": str(tmp_path / "model.py"), "decoupled": False}
    )
    assert server.next_message() == {"op": "initializing"}
    assert server.next_message() == {"op": "init_done", "error": None, "has_is_ready": True}
    runner = server.stub.runner
    assert runner.initialized and runner.instance_name == "m_0"
    assert runner.model.directory == str(tmp_path)
    server.stub.connection.handle({"op": "is_ready", "id": 3})
    assert server.next_message() == {"op": "ready_done", "id": 3, "ready": True}
    with pytest.raises(ServerGone):
        server.stub.connection.handle({"op": "finalize"})
    finalized = server.next_message()
    assert finalized["op"] == "finalized" and finalized["error"].startswith("RuntimeError: finalize failed")
    assert runner.finalizing


def test_auto_complete_returns_the_models_config(server: ServerEnd, tmp_path: Path) -> None:
    config = json.dumps({"name": "m", "max_batch_size": 0})
    server.stub.connection.handle(
        {"op": "auto_complete", "model_file": str(tmp_path / "model.py"), "config": config}
    )
    done = server.next_message()
    assert done["error"] is None and json.loads(done["config"]) == {"name": "m", "max_batch_size": 4}


def test_a_model_that_fails_to_import_says_where(server: ServerEnd, tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text("import no_such_module_here\n")
    server.stub.connection.handle(
        {"op": "auto_complete", "model_file": str(tmp_path / "model.py"), "config": "{}"}
    )
    done = server.next_message()
    assert done["stage"] == "import"
    assert done["error"].startswith("ModuleNotFoundError: No module named 'no_such_module_here'")
    assert f"{tmp_path / 'model.py'}(1): <module>" in done["error"]
