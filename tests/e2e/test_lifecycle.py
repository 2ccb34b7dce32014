"""Startup and shutdown: draining on SIGTERM, --exit-timeout-secs, --exit-on-error, --strict-readiness."""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from e2e.clients import poll
from e2e.models import add_identity, add_slow, copy_examples, slow_inputs, write_config
from e2e.server_process import free_ports, running_server, start_server
from modelhost.host.devices import gpu_count


@pytest.fixture(scope="module")
def slow_repo(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Path:
    repo = tmp_path_factory.mktemp("slow_repo")
    add_slow(repo)
    copy_examples(repo, "simple")
    return repo


def test_sigterm_lets_in_flight_requests_finish(slow_repo: Path, tmp_path: Path) -> None:
    server = start_server([slow_repo], tmp_path / "server.log")
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    outcome: dict[str, object] = {}

    def slow_request() -> None:
        try:
            outcome["result"] = client.infer("slow", slow_inputs(2000)).as_numpy("Y")
        except Exception as e:  # reported by the assertion below
            outcome["error"] = e

    worker = threading.Thread(target=slow_request)
    worker.start()
    time.sleep(0.5)  # the request is running
    server.process.send_signal(signal.SIGTERM)
    # While the request in flight finishes, the ports stay open (as in Triton): not ready, and a new inference
    # request is refused in Triton's words, on HTTP and gRPC.
    stopping = "Server is stopping, scheduler for model has stopped accepting new inference requests"
    # Clients closed here, not left to a garbage collection on whichever thread runs it.
    probe = httpclient.InferenceServerClient(server.http_url)
    gprobe = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        poll(lambda: not probe.is_server_ready(), 10, "not ready")
        with pytest.raises(InferenceServerException, match=stopping) as refused:
            probe.infer("slow", slow_inputs(1))
        assert refused.value.status() == "503"
        with pytest.raises(InferenceServerException, match=stopping) as refused:
            gprobe.infer("slow", _grpc_slow_inputs(1))
        assert refused.value.status() == "StatusCode.UNAVAILABLE"
        worker.join(60)
    finally:
        probe.close()
        gprobe.close()
        client.close()
    assert server.process.wait(30) == 0
    assert "error" not in outcome, outcome.get("error")
    assert isinstance(outcome["result"], np.ndarray)
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://{server.http_url}/v2/health/live", timeout=2)
    log = server.log()
    assert "server stopped" in log
    # Triton's lines for the load and the shutdown, which scripts (Triton's L0_logging among them) look for.
    assert "loading: slow:1" in log
    assert re.search(
        r"\| onnxruntime +\| modelhost\.backends\.onnxruntime\.backend +\|", log
    )  # backends table
    assert re.search(r"TRITONBACKEND_ModelInstanceInitialize: slow_\d+_0 \(CPU device 0\)", log)
    assert log.count("Waiting for in-flight requests to complete.") == 1
    # while the slow request runs (once a second), then when it is done
    assert "Model 'slow' (version 1) has 1 in-flight inferences" in log
    assert "Found 0 model versions that have in-flight inferences" in log
    assert "All models are stopped, unloading models" in log
    assert "successfully unloaded 'slow' version 1" in log
    assert "Found 0 live models and 0 in-flight non-inference requests" in log


def _grpc_slow_inputs(iterations: int) -> list[grpcclient.InferInput]:
    out = []
    for http_input in slow_inputs(iterations):
        tensor = grpcclient.InferInput(http_input.name(), http_input.shape(), http_input.datatype())
        tensor.set_data_from_numpy(
            np.array([iterations], dtype=np.int64)
            if http_input.name() == "ITERS"
            else np.full((256, 256), 0.001, dtype=np.float32)
        )
        out.append(tensor)
    return out


def test_exit_timeout_bounds_shutdown(slow_repo: Path, tmp_path: Path) -> None:
    server = start_server([slow_repo], tmp_path / "server.log", "--exit-timeout-secs=1")
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    worker = threading.Thread(target=lambda: _ignore_errors(lambda: client.infer("slow", slow_inputs(40000))))
    worker.start()
    time.sleep(0.5)
    server.process.send_signal(signal.SIGINT)
    assert server.process.wait(20) == 0  # the request alone would run ~30 s
    log = server.log()
    assert "exit timeout expired with 1 requests still in flight" in log
    assert "Found 1 model versions that have in-flight inferences" in log
    assert "Model 'slow' (version 1) has 1 in-flight inferences" in log
    assert "All models are stopped" not in log
    worker.join(60)
    client.close()  # here, not in a garbage collection on whichever thread runs it


def _ignore_errors(fn: Callable[[], object]) -> None:
    with contextlib.suppress(Exception):  # the server may close the connection at exit
        fn()


@pytest.fixture(scope="module")
def broken_repo(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Path:
    repo = tmp_path_factory.mktemp("broken_repo")
    copy_examples(repo, "simple")
    add_identity(repo, "bad_config", "FP32")
    (repo / "bad_config" / "config.pbtxt").write_text(
        'platform: "onnxruntime_onnx"\nmax_batch_size: "eight"\n'
    )
    add_identity(repo, "corrupt_model", "FP32")
    (repo / "corrupt_model" / "1" / "model.onnx").write_bytes(b"this is not an onnx file")
    add_identity(repo, "wrong_type", "FP32")
    write_config(
        repo / "wrong_type",
        'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n',
    )
    add_identity(repo, "gpu_only", "FP32", extra="instance_group [ { kind: KIND_GPU } ]")
    return repo


def test_exit_on_error_is_the_default(broken_repo: Path, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="exited with 1") as e:
        start_server([broken_repo], tmp_path / "server.log")
    assert "failed to load all models" in str(e.value)


@pytest.mark.skipif(gpu_count() > 0, reason="checks the load error on a host without a GPU")
def test_broken_models_are_unavailable_and_others_serve(broken_repo: Path, tmp_path: Path) -> None:
    with running_server(
        [broken_repo], tmp_path / "server.log", "--exit-on-error=false", wait_ready=False
    ) as server:
        base = f"http://{server.http_url}"
        # Strict readiness (the default): not ready while a model failed.
        assert requests.get(f"{base}/v2/health/ready", timeout=5).status_code == 400
        index = {m["name"]: m for m in requests.post(f"{base}/v2/repository/index", timeout=5).json()}
        assert index["simple"]["state"] == "READY"
        for name, words in (
            ("bad_config", "config.pbtxt"),
            ("corrupt_model", "corrupt_model"),
            ("wrong_type", "TYPE_INT32"),
            ("gpu_only", "KIND_GPU"),
        ):
            assert index[name]["state"] == "UNAVAILABLE"
            assert words in index[name]["reason"], index[name]["reason"]
            assert index[name]["reason"] in server.log()
        client = httpclient.InferenceServerClient(server.http_url)
        a = httpclient.InferInput("INPUT0", [1, 16], "INT32")
        a.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
        b = httpclient.InferInput("INPUT1", [1, 16], "INT32")
        b.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
        assert client.infer("simple", [a, b]).as_numpy("OUTPUT0").sum() == 32
        assert not client.is_model_ready("corrupt_model")


def test_non_strict_readiness(broken_repo: Path, tmp_path: Path) -> None:
    with running_server(
        [broken_repo], tmp_path / "server.log", "--exit-on-error=false", "--strict-readiness=false"
    ) as server:
        assert requests.get(f"http://{server.http_url}/v2/health/ready", timeout=5).status_code == 200


def test_duplicate_model_names_across_repositories(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    copy_examples(first, "simple")
    copy_examples(second, "simple", "identity_fp32")
    with running_server(
        [first, second], tmp_path / "server.log", "--exit-on-error=false", wait_ready=False
    ) as server:
        index = {
            m["name"]: m
            for m in requests.post(f"http://{server.http_url}/v2/repository/index", timeout=5).json()
        }
        assert index["simple"]["state"] == "UNAVAILABLE"
        assert "multiple model repositories" in index["simple"]["reason"]
        assert index["identity_fp32"]["state"] == "READY"


def test_model_config_name_and_ignored_version_dirs(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    add_identity(repo, "ident", "FP32")
    (repo / "ident" / "configs").mkdir()
    (repo / "ident" / "configs" / "small.pbtxt").write_text(
        (repo / "ident" / "config.pbtxt").read_text().replace("max_batch_size: 8", "max_batch_size: 2")
    )
    # Not versions: a leading zero and a name.
    save_dir = repo / "ident"
    (save_dir / "01").mkdir()
    (save_dir / "latest").mkdir()
    with running_server([repo], tmp_path / "server.log", "--model-config-name=small") as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.get_model_config("ident")["max_batch_size"] == 2
        assert client.get_model_metadata("ident")["versions"] == ["1"]


def test_missing_repository_fails_to_start(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="exited with 1"):
        start_server([tmp_path / "does-not-exist"], tmp_path / "server.log")


def test_a_server_that_failed_to_initialize_serves_not_live_with_exit_on_error_false(tmp_path: Path) -> None:
    # As tritonserver (L0_lifecycle test_parse_error_noexit): up, answering, neither live nor ready.
    http_port, grpc_port, metrics_port = free_ports(3)
    command = [
        sys.executable, "-m", "modelhost", "serve", f"--model-repository={tmp_path / 'does-not-exist'}",
        "--exit-on-error=false", f"--http-port={http_port}", f"--grpc-port={grpc_port}",
        f"--metrics-port={metrics_port}",
    ]  # fmt: skip
    with open(tmp_path / "server.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    http = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
    grpc_client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    try:

        def answers() -> bool:
            try:
                return http.get_server_metadata()["name"] == "triton"
            except Exception:  # not listening yet
                return False

        poll(answers, 60, "the server answers its metadata")
        assert not http.is_server_live() and not http.is_server_ready()
        assert not grpc_client.is_server_live() and not grpc_client.is_server_ready()
        assert grpc_client.get_server_metadata().name == "triton"
        assert process.poll() is None
    finally:
        http.close()  # its sockets, those of the attempts before the server listened included
        grpc_client.close()
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    assert "failed to initialize the server; serving, not live" in (tmp_path / "server.log").read_text()


@pytest.mark.parametrize("taken", ["http", "grpc", "metrics"])
def test_port_in_use_exits_with_one_clear_message(taken: str, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    copy_examples(repo, "simple")
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(RuntimeError, match="exited with 1") as failed:
            start_server([repo], tmp_path / "server.log", f"--{taken}-port={port}")
    log = str(failed.value)
    assert log.count("address already in use") == 1, log
    assert "failed to start the server" in log and str(port) in log, log
    assert "exit timeout expired" not in log, log


def test_a_specific_version_without_its_directory_is_skipped_and_the_others_load(tmp_path: Path) -> None:
    # As Triton (L0_metrics serves such a model): versions [1, 3] with only 1 present loads version 1.
    repo = tmp_path / "repo"
    copy_examples(repo, "simple")
    config = repo / "simple" / "config.pbtxt"
    config.write_text(config.read_text() + "\nversion_policy: { specific { versions: [1, 3] }}\n")
    with running_server([repo], tmp_path / "server.log") as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.is_model_ready("simple", "1")
        assert client.get_model_metadata("simple")["versions"] == ["1"]
        assert (
            "version 3 is specified for model 'simple', but the version directory is not present"
            in server.log()
        )


def test_a_model_being_unloaded_leaves_the_server_ready(slow_repo: Path, tmp_path: Path) -> None:
    # Triton answers ready right after an unload request (its L0_lifecycle test_concurrent_model_load_unload):
    # a version unloading on purpose, its last request still running, is no reason for not ready.
    server = start_server(
        [slow_repo],
        tmp_path / "server.log",
        "--model-control-mode=explicit",
        "--load-model=slow",
        "--log-verbose=1",
    )
    try:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
        worker = threading.Thread(target=lambda: client.infer("slow", slow_inputs(3000)))
        worker.start()
        # The server took the request (its verbose line is written as the request goes to the model), whatever
        # the machine's speed; it runs for seconds after.
        poll(lambda: "request for model 'slow'" in server.log(), 30, "the request reached the server")
        control = httpclient.InferenceServerClient(server.http_url)
        control.unload_model("slow")
        states = {row["name"]: row.get("state") for row in control.get_model_repository_index()}
        assert states["slow"] == "UNLOADING"
        assert control.is_server_ready()
        worker.join(60)
        poll(lambda: not control.is_model_ready("slow"), 10, "unloaded")
        assert control.is_server_ready()
    finally:
        assert server.stop() == 0


def test_sigterm_waits_for_live_sequences_and_serves_their_later_requests(tmp_path: Path) -> None:
    # As Triton (its L0_lifecycle test_shutdown_sequence): a sequence begun before the stop counts as in flight;
    # its later requests are served, a new sequence is refused, and the server exits once the sequence ends.
    repo = tmp_path / "repo"
    shutil.copytree(Path(__file__).parent / "sequence_models" / "py_accumulator", repo / "py_accumulator")
    (repo / "py_accumulator" / "1").mkdir(exist_ok=True)
    server = start_server([repo], tmp_path / "server.log")
    client = grpcclient.InferenceServerClient(server.grpc_url)

    def step(value: int, **flags: object) -> int:
        tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
        result = client.infer("py_accumulator", [tensor], **flags).as_numpy("OUTPUT")  # type: ignore[arg-type]
        assert result is not None
        return int(result[0, 0])

    assert step(1, sequence_id=7, sequence_start=True) == 1
    server.process.send_signal(signal.SIGTERM)
    poll(lambda: "has 1 in-flight inferences" in server.log(), 10, "the live sequence counted as in flight")
    with pytest.raises(InferenceServerException, match="Server is stopping"):
        step(5, sequence_id=8, sequence_start=True)
    assert server.process.poll() is None  # still draining: the sequence is live
    assert step(2, sequence_id=7, sequence_end=True) == 3
    assert server.process.wait(30) == 0
    assert "All models are stopped" in server.log()


SLOW_FINALIZE = """
import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.marker = config["parameters"]["marker"]["string_value"]
        self.finalize_s = float(config["parameters"]["finalize_s"]["string_value"])

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "INPUT0")]) for r in requests]

    def finalize(self):
        time.sleep(self.finalize_s)
        with open(self.marker, "a") as f:
            f.write("finalized\\n")
"""


def test_shutdown_waits_for_a_version_unloading_in_the_background(tmp_path: Path) -> None:
    # As Triton (its L0_lifecycle test_shutdown_while_background_unloading): a reload leaves the old version to
    # finalize in the background; a stop then waits for it too, and both unloads are logged.
    repo, marker = tmp_path / "repo", tmp_path / "finalized.txt"
    (repo / "slow_finalize" / "1").mkdir(parents=True)
    (repo / "slow_finalize" / "1" / "model.py").write_text(SLOW_FINALIZE)
    config = (
        'backend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        f'parameters {{ key: "marker" value: {{ string_value: "{marker}" }} }}\n'
    )
    finalize_s = 'parameters {{ key: "finalize_s" value: {{ string_value: "{}" }} }}\n'
    # The version loaded first takes far longer to finalize than the rest of a shutdown takes; the second none.
    (repo / "slow_finalize" / "config.pbtxt").write_text(config + finalize_s.format(4))
    server = start_server([repo], tmp_path / "server.log", "--model-control-mode=explicit", "--load-model=*")
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        (repo / "slow_finalize" / "config.pbtxt").write_text(config + finalize_s.format(0))
        client.load_model("slow_finalize")  # a new version; the old one finalizes in the background
    finally:
        client.close()
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(60) == 0
    log = server.log()
    assert log.count("successfully unloaded 'slow_finalize' version 1") == 2
    assert log.index("server stopped") > log.rindex("successfully unloaded")
    assert marker.read_text().splitlines() == ["finalized", "finalized"]
