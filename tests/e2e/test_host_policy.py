"""--host-policy: an instance group's policy (its own, or its kind's) puts its instances on the cores and NUMA
node named: a python model's stub process, and the threads that load and run an ONNX model; the rest of the
server stays where it was. A policy naming a core or node this host lacks stops the command, naming it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from e2e.models import copy_examples, write_config
from e2e.server_process import RunningServer, running_server

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPU cores to tell apart")

# The stub process's cores and memory policy mode (get_mempolicy(2); 2 is MPOL_BIND).
MODEL = """
import ctypes
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        cores = np.array(sorted(os.sched_getaffinity(0)), dtype=np.int32)
        libc = ctypes.CDLL(None, use_errno=True)
        mode, mask = ctypes.c_int(-1), ctypes.c_ulong(0)
        libc.syscall(239, ctypes.byref(mode), ctypes.byref(mask), ctypes.c_ulong(65), None, ctypes.c_ulong(0))
        policy = np.array([mode.value], dtype=np.int32)
        pid = np.array([os.getpid()], dtype=np.int32)
        tensors = [pb_utils.Tensor("CORES", cores), pb_utils.Tensor("MEMPOLICY", policy), pb_utils.Tensor("PID", pid)]
        return [pb_utils.InferenceResponse(tensors) for _ in requests]
"""


def _add_placed(repo: Path, name: str, policy: str) -> None:
    group = f"instance_group [ {{ kind: KIND_CPU {f'host_policy: {policy!r}' if policy else ''} }} ]"
    write_config(
        repo / name,
        f"""
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "CORES" data_type: TYPE_INT32 dims: [ -1 ] }},
         {{ name: "MEMPOLICY" data_type: TYPE_INT32 dims: [ 1 ] }},
         {{ name: "PID" data_type: TYPE_INT32 dims: [ 1 ] }} ]
{group.replace("'", '"')}
""",
    )
    (repo / name / "1").mkdir()
    (repo / name / "1" / "model.py").write_text(MODEL)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("repo")
    _add_placed(repo, "pinned", "pinned")  # a policy of its own
    _add_placed(repo, "by_kind", "")  # KIND_CPU: the `cpu` policy
    copy_examples(repo, "simple")  # ONNX Runtime, KIND_CPU: the `cpu` policy
    log = tmp_path_factory.mktemp("logs") / "server.log"
    policies = ("--host-policy=pinned,cpu-cores=1", "--host-policy=pinned,numa-node=0",
                "--host-policy=cpu,cpu-cores=0")  # fmt: skip
    with running_server([repo], log, *policies) as running:
        yield running


def _placed(server: RunningServer, model: str) -> tuple[list[int], int]:
    cores, memory_policy, _ = _placed_stub(server, model)
    return cores, memory_policy


def _placed_stub(server: RunningServer, model: str) -> tuple[list[int], int, int]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        tensor = httpclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.zeros(1, dtype=np.float32))
        result = client.infer(model, [tensor])
    finally:
        client.close()
    return (
        result.as_numpy("CORES").tolist(),
        int(result.as_numpy("MEMPOLICY")[0]),
        int(result.as_numpy("PID")[0]),
    )


def test_a_groups_own_policy_places_its_stub_process(server: RunningServer) -> None:
    assert _placed(server, "pinned") == ([1], 2)  # core 1, memory bound to node 0


def test_a_restarted_stub_keeps_its_place(server: RunningServer) -> None:
    *_, pid = _placed_stub(server, "pinned")
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:  # the first request after the kill may fail with it; the restarted stub answers the next
        try:
            cores, memory_policy, new_pid = _placed_stub(server, "pinned")
        except InferenceServerException:
            assert time.monotonic() < deadline
            time.sleep(0.2)
            continue
        if new_pid != pid:
            break
    assert (cores, memory_policy) == ([1], 2)


def test_the_kinds_policy_applies_to_a_group_without_one(server: RunningServer) -> None:
    cores, memory_policy = _placed(server, "by_kind")
    assert cores == [0]
    assert memory_policy == 0  # the `cpu` policy names no node: the default memory policy


def _allowed(status: Path) -> str:
    for line in status.read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no Cpus_allowed_list in {status}")


def test_onnx_runtime_threads_follow_the_policy_and_the_rest_of_the_server_does_not(
    server: RunningServer,
) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), a + a)
    finally:
        client.close()
    pid = server.process.pid  # the engine: it loads and runs the ONNX instances
    everyone = _allowed(Path(f"/proc/{pid}/status"))
    assert everyone != "0", "the main thread was left bound to the policy's cores"
    threads = [_allowed(task / "status") for task in Path(f"/proc/{pid}/task").iterdir()]
    assert "0" in threads, threads  # the instance's worker thread (and ONNX Runtime's own)
    assert threads.count(everyone) >= 1


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ("cpu,cpu-cores=4096", "CPU core(s) 4096 are not among this host's cores available to the server"),
        ("cpu,numa-node=63", "NUMA node 63 does not exist on this host"),
        ("cpu,cpu-cores=two", "'cpu-cores' takes core numbers and ranges such as 0-3,8, got 'two'"),
        ("cpu,threads=2", "unknown setting 'threads'"),
        ("cpu", "--host-policy must be <policy>,<setting>=<value>, got 'cpu'"),
    ],
)
def test_a_policy_this_host_cannot_follow_stops_the_command(
    policy: str, message: str, tmp_path: Path
) -> None:
    command = [sys.executable, "-m", "modelhost", "serve", f"--model-repository={tmp_path}",
               f"--host-policy={policy}"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
