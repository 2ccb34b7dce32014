"""A stub's life on the server's side, with a real stub process and an event loop of the test's: started (its
model initialized), asked is_ready, restarted after it dies (not healthy meanwhile), finalized at close."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelhost.backends.api import BackendServices
from modelhost.backends.python.bls import ModelCalls
from modelhost.backends.python.environments import SERVER_PYTHON
from modelhost.backends.python.lifecycle import StubSupervisor
from modelhost.backends.python.process import Stub, StubFailed, StubSettings

MODEL = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        if args["model_name"] == "broken":
            raise ValueError("cannot start")

    def is_ready(self):
        return True

    def finalize(self):
        pb_utils.Logger.log_info("finalized")
'''


class _Instance:
    """The owner, whose host placement (none here) a restarted stub gets."""


@pytest.fixture
def services() -> Iterator[BackendServices]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield BackendServices(loop=loop)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def supervisor(services: BackendServices, model_file: Path, name: str = "m") -> StubSupervisor:
    settings = StubSettings(stub_timeout_seconds=30, shm_region_prefix_name=f"mhtest_life_{os.getpid()}_")
    life: list[StubSupervisor] = []

    def on_message(stub: Stub, message: dict[str, Any]) -> None:
        """The instance's routing of what the supervisor handles."""
        if message["op"] == "ready_done":
            life[0].on_ready_done(message)
        elif message["op"] == "finalized":
            life[0].on_finalized(stub, message)

    init = {
        "op": "init",
        "args": {"model_name": name, "model_instance_name": f"{name}_0"},
        "model_file": str(model_file),
        "decoupled": False,
    }
    calls = ModelCalls(name, services, 30)
    life.append(
        StubSupervisor(_Instance(), f"{name}_0", name, settings, SERVER_PYTHON, services, calls, init, on_message)
    )
    return life[0]


def test_a_stub_is_started_asked_restarted_and_closed(services: BackendServices, tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(MODEL)
    life = supervisor(services, tmp_path / "model.py")
    assert services.loop is not None
    try:
        assert life.healthy
        assert asyncio.run_coroutine_threadsafe(life.check_ready(), services.loop).result(30) is True
        first = life.stub
        first.process.kill()
        deadline = time.monotonic() + 30
        while (life.stub is first or not life.healthy) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert life.stub is not first and life.healthy and life.failure is None
        assert first.process.poll() is not None
    finally:
        life.close()
    assert not life.healthy
    assert life.stub.finalized.is_set() and life.stub.process.poll() is not None


def test_a_model_that_cannot_initialize_fails_the_start(services: BackendServices, tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(MODEL)
    with pytest.raises(StubFailed, match=r"^Internal: ValueError: cannot start"):
        supervisor(services, tmp_path / "model.py", name="broken")
