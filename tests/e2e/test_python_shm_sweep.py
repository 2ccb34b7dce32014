"""A server killed with SIGKILL cannot remove its python models' shared memory; the next server with the same
prefix does, when it starts its first python model (backends/python/ipc.py `sweep_stale_segments`)."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from e2e.clients import poll
from e2e.server_process import start_server

PYTHON_MODELS = Path(__file__).parent / "python_models"


def test_a_killed_servers_shared_memory_is_swept_by_the_next(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    model = "identity_delay"
    shutil.copytree(PYTHON_MODELS / model, repo / model, ignore=shutil.ignore_patterns("__pycache__"))
    prefix = f"mh_sweep_e2e_{os.getpid()}_"
    flag = f"--backend-config=python,shm-region-prefix-name={prefix}"

    def segments() -> set[str]:
        return {n for n in os.listdir("/dev/shm") if n.startswith(prefix)}

    first = start_server([repo], tmp_path / "first.log", flag)
    try:
        client = httpclient.InferenceServerClient(first.http_url)
        # Larger than ipc.INLINE_BYTES, so that it travels in shared memory rather than in the message.
        tensor = httpclient.InferInput("INPUT0", [4096], "FP32")
        tensor.set_data_from_numpy(np.ones(4096, dtype=np.float32))
        client.infer(model, [tensor])
        client.close()
    finally:
        first.stop(signal.SIGKILL)
    left = segments()
    assert left, "the killed server left no shared memory to sweep"
    second = start_server([repo], tmp_path / "second.log", flag)
    try:
        poll(lambda: not (left & segments()), 30, "the killed server's segments removed")
    finally:
        second.stop()
    poll(lambda: not segments(), 30, "no segments left after a clean stop")
