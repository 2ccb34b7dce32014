"""`modelhost ray serve` end to end: a real local Ray cluster (2 CPUs), the repository's models as Ray Serve
deployments, and tritonclient against the ingress, compared with a single modelhost server's answers."""

from __future__ import annotations

import csv
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig
from tritonclient.utils import InferenceServerException

import modelhost
from e2e.certificates import CertificateAuthority
from e2e.memory_models import write_holder
from e2e.server_process import RunningServer, _http_ok, free_ports

pytest.importorskip("ray")

EXAMPLES = Path(modelhost.__file__).parent / "examples"
PYTHON_MODELS = Path(__file__).parents[1] / "e2e" / "python_models"
POOL = [f"m{i}" for i in range(1, 6)]
# The model whose replica a test kills, found by its process title: named for this run alone, so that another
# cluster on the machine (another run of the suite) is never hit.
VICTIM = f"victim_{os.getpid()}"

DEPLOYMENTS = """
defaults:
  actor: {num_cpus: 0.05}
  num_replicas: 1
deployments:
  hot:
    models: [hot]
    autoscaling:
      min_replicas: 1
      max_replicas: 2
      target_ongoing_requests: 2
      upscale_delay_s: 0.5
      downscale_delay_s: 2
      metrics_interval_s: 0.5
      look_back_period_s: 1
  hot_queue:
    models: [hot_queue]
    autoscaling:
      min_replicas: 1
      max_replicas: 2
      target_queue_time_ms: 20
      upscale_delay_s: 0.5
      downscale_delay_s: 2
      metrics_interval_s: 0.5
      look_back_period_s: 1
  pool:
    models: [m1, m2, m3, m4, m5]
    max_models_per_replica: 2
  budget_pool:
    models: [big1, big2]
    max_models_per_replica: 2
    actor: {memory: null}
    server: {model_memory_budget: 262144000}  # 250 MiB: one model of 160 MiB and its stub, not two
"""


def _copy_model(source: Path, repo: Path, name: str) -> None:
    target = repo / name
    shutil.copytree(source, target)
    config = target / "config.pbtxt"
    text = config.read_text()
    old = text.split('name: "', 1)[1].split('"', 1)[0]
    config.write_text(text.replace(f'name: "{old}"', f'name: "{name}"', 1))


def build_repository(repo: Path) -> None:
    for name in ("simple", "simple_ensemble"):
        shutil.copytree(EXAMPLES / name, repo / name)
    for name in ("a", "b", *POOL):
        _copy_model(EXAMPLES / "simple", repo, name)
    # An ensemble whose steps' model has a deployment of its own (and no other user in these tests).
    for name in ("big1", "big2"):
        write_holder(repo, name, MIB="160")
    # What `modelhost tune --url` reconfigures: one instance and batches of 2 at most, so that the test's small
    # space (which holds the model's own values too) is three variants.
    _copy_model(EXAMPLES / "simple", repo, "tuned")
    config = repo / "tuned" / "config.pbtxt"
    text = config.read_text().replace("max_batch_size: 8", "max_batch_size: 2")
    config.write_text(text + "\ninstance_group [ { count: 1, kind: KIND_CPU } ]\n")
    _copy_model(EXAMPLES / "simple", repo, "steps")
    _copy_model(EXAMPLES / "simple_ensemble", repo, "split_ensemble")
    config = repo / "split_ensemble" / "config.pbtxt"
    config.write_text(config.read_text().replace('model_name: "simple"', 'model_name: "steps"'))
    _copy_model(PYTHON_MODELS / "identity_delay", repo, "hot")
    _copy_model(PYTHON_MODELS / "identity_delay", repo, "hot_queue")
    _copy_model(PYTHON_MODELS / "identity_delay", repo, VICTIM)
    shutil.copytree(PYTHON_MODELS / "repeat_decoupled", repo / "repeat_decoupled")
    # A model that cannot load: its deployment fails, the others serve.
    _copy_model(EXAMPLES / "simple", repo, "broken")
    (repo / "broken" / "1" / "model.onnx").write_bytes(b"not an onnx model")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("ray_repo")
    build_repository(repo)
    return repo


RAY = str(Path(sys.executable).parent / "ray")
# The test's cluster is this machine's alone: no token to share between the head and the ingress.
RAY_ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def head() -> Iterator[str]:
    """A Ray cluster's head on this machine, as `ray start --head` runs one: what --address joins."""
    (port,) = free_ports(1)
    started = subprocess.run(
        [
            RAY,
            "start",
            "--head",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=RAY_ENV,
    )
    assert started.returncode == 0, started.stdout + started.stderr
    yield f"127.0.0.1:{port}"
    subprocess.run([RAY, "stop", "--force"], capture_output=True, timeout=120, env=RAY_ENV)


@pytest.fixture(scope="module")
def cluster(head: str, repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    work = tmp_path_factory.mktemp("ray_ingress")
    deployments = work / "deployments.yaml"
    deployments.write_text(DEPLOYMENTS)
    http_port, grpc_port, metrics_port = free_ports(3)
    log_path = work / "ingress.log"
    command = [
        sys.executable,
        "-m",
        "modelhost",
        "ray",
        "serve",
        f"--model-repository={repository}",
        f"--deployments={deployments}",
        f"--address={head}",
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
        f"--metrics-port={metrics_port}",
        "--metrics-address=127.0.0.1",
        "--http-address=127.0.0.1",
        "--grpc-address=127.0.0.1",
        "--strict-readiness=false",  # the broken model's deployment fails on purpose
    ]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=RAY_ENV)
    server = RunningServer(process, http_port, grpc_port, metrics_port, log_path)
    deadline = time.monotonic() + 240
    while not _http_ok(http_port, "/v2/health/ready"):
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop(signal.SIGKILL)
            raise RuntimeError(f"the ingress did not start:\n{server.log()}")
        time.sleep(0.25)
    yield server
    if server.process.poll() is None:  # the stop test stops it; a failed run leaves nothing behind
        server.stop(signal.SIGKILL)


@pytest.fixture(scope="module")
def single(repository: Path) -> Iterator[modelhost.Server]:
    """One modelhost server on the same repository: what the cluster's answers must equal."""
    with modelhost.Server(
        repository, http_port=0, model_control_mode="explicit", load_models=["simple"]
    ) as server:
        yield server


@pytest.fixture
def http(cluster: RunningServer) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(cluster.http_url, concurrency=8, network_timeout=60)
    yield client
    client.close()


@pytest.fixture
def grpc(cluster: RunningServer) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(cluster.grpc_url)
    yield client
    client.close()


def _simple_inputs(module: Any, offset: int = 0) -> list[Any]:
    a = np.arange(16, dtype=np.int32).reshape(1, 16) + offset
    b = np.ones((1, 16), dtype=np.int32)
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def _until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.25)


def _index(http: httpclient.InferenceServerClient) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in http.get_model_repository_index()}


def test_answers_equal_a_single_servers(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient, single: modelhost.Server
) -> None:
    assert http.is_server_live() and grpc.is_server_ready()
    reference = httpclient.InferenceServerClient(f"localhost:{single.ports['http']}")
    assert http.get_model_metadata("simple") == reference.get_model_metadata("simple")
    assert http.get_model_config("simple") == reference.get_model_config("simple")
    reference.close()
    expected = single.model("simple").infer(
        {"INPUT0": np.arange(16, dtype=np.int32).reshape(1, 16), "INPUT1": np.ones((1, 16), dtype=np.int32)}
    )
    answer = http.infer("simple", _simple_inputs(httpclient))
    assert np.array_equal(answer.as_numpy("OUTPUT0"), expected["OUTPUT0"])
    assert np.array_equal(answer.as_numpy("OUTPUT1"), expected["OUTPUT1"])
    answer_grpc = grpc.infer("simple", _simple_inputs(grpcclient))
    assert np.array_equal(answer_grpc.as_numpy("OUTPUT0"), expected["OUTPUT0"])
    assert grpc.get_model_metadata("simple", as_json=True)["name"] == "simple"
    assert "model_repository" in http.get_server_metadata()["extensions"]


def test_replicas_reserve_the_memory_their_models_took(cluster: RunningServer) -> None:
    log = cluster.log()
    assert re.search(r"deployment 'simple' reserves \d+ MiB a replica", log), log
    assert "could not measure model 'broken'" in log


def test_unknown_model_is_not_found(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    with pytest.raises(InferenceServerException) as e:
        http.infer("nope", _simple_inputs(httpclient))
    assert e.value.status() == "404"
    assert "Request for unknown model: 'nope' is not found" in str(e.value)
    with pytest.raises(InferenceServerException) as e:
        grpc.infer("nope", _simple_inputs(grpcclient))
    assert e.value.status() == "StatusCode.NOT_FOUND"


def test_bad_input_is_the_clients_error(http: httpclient.InferenceServerClient) -> None:
    wrong = httpclient.InferInput("INPUT0", [1, 16], "FP32")
    wrong.set_data_from_numpy(np.zeros((1, 16), dtype=np.float32))
    with pytest.raises(InferenceServerException) as e:
        http.infer("simple", [wrong, _simple_inputs(httpclient)[1]])
    assert e.value.status() == "400"
    assert "INPUT0" in str(e.value)
    assert http.infer("simple", _simple_inputs(httpclient)).as_numpy("OUTPUT0") is not None  # still serving


def test_a_failed_deployment_leaves_the_others_serving(http: httpclient.InferenceServerClient) -> None:
    index = _index(http)
    assert index["broken"]["state"] == "UNAVAILABLE" and index["broken"]["reason"]
    assert index["a"]["state"] == "READY" and index["a"]["replicas"] == 1
    with pytest.raises(InferenceServerException) as e:
        http.infer("broken", _simple_inputs(httpclient))
    assert "not at ready state" in str(e.value)
    assert not http.is_model_ready("broken")
    assert http.is_model_ready("a")


def test_ensemble(http: httpclient.InferenceServerClient) -> None:
    answer = http.infer("simple_ensemble", _simple_inputs(httpclient))
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    # simple twice: (a+b, a-b) then (2a, 2b)
    assert np.array_equal(answer.as_numpy("OUTPUT0"), 2 * a)
    assert np.array_equal(answer.as_numpy("OUTPUT1"), 2 * np.ones((1, 16), dtype=np.int32))


def test_an_ensemble_across_two_deployments(http: httpclient.InferenceServerClient) -> None:
    """`split_ensemble`'s deployment holds the ensemble alone: its steps run in the deployment of `steps`, are
    counted there, and cannot run while `steps` is unloaded; loaded again, the ensemble answers again."""

    def steps_counted() -> int:
        stats = http.get_inference_statistics("steps")["model_stats"]
        return int(stats[0]["inference_stats"]["success"]["count"]) if stats else 0

    def answers_right() -> None:
        answer = http.infer("split_ensemble", _simple_inputs(httpclient))
        assert np.array_equal(answer.as_numpy("OUTPUT0"), 2 * np.arange(16, dtype=np.int32).reshape(1, 16))
        assert np.array_equal(answer.as_numpy("OUTPUT1"), 2 * np.ones((1, 16), dtype=np.int32))

    before = steps_counted()
    answers_right()
    _until(lambda: steps_counted() >= before + 2, 15, "both steps counted in the deployment of `steps`")
    http.unload_model("steps")
    _until(lambda: not http.is_model_ready("split_ensemble"), 30, "the ensemble not ready without `steps`")
    with pytest.raises(InferenceServerException) as e:
        http.infer("split_ensemble", _simple_inputs(httpclient))
    assert "in ensemble 'split_ensemble'" in str(e.value) and "'steps'" in str(e.value), str(e.value)
    assert http.is_model_ready("simple_ensemble")  # another ensemble, on another deployment, unaffected
    http.load_model("steps")
    _until(lambda: http.is_model_ready("split_ensemble"), 60, "the ensemble ready once `steps` is back")
    answers_right()


def test_streaming_a_decoupled_model(grpc: grpcclient.InferenceServerClient) -> None:
    answers: list[Any] = []
    done = threading.Event()

    def callback(result: Any, error: Any) -> None:
        answers.append(error if error is not None else result)
        if error is not None or result.get_response().parameters.get("triton_final_response", None):
            done.set()

    grpc.start_stream(callback)
    values = np.array([4, 2, 0, 1], dtype=np.int32)
    inputs = [grpcclient.InferInput("IN", [4], "INT32"), grpcclient.InferInput("DELAY", [4], "UINT32")]
    inputs[0].set_data_from_numpy(values)
    inputs[1].set_data_from_numpy(np.zeros(4, dtype=np.uint32))
    grpc.async_stream_infer("repeat_decoupled", inputs)
    _until(lambda: len(answers) >= 4, 30, "four streamed responses")
    grpc.stop_stream()
    assert [int(a.as_numpy("OUT")[0]) for a in answers[:4]] == [4, 2, 0, 1]


def test_multiplexed_pool_serves_more_models_than_it_holds(http: httpclient.InferenceServerClient) -> None:
    # Five models through one replica that keeps two: every answer right, evicted ones loaded again.
    for round_ in range(2):
        for offset, name in enumerate(POOL):
            answer = http.infer(name, _simple_inputs(httpclient, offset))
            assert answer.get_response()["model_name"] == name
            expected = np.arange(16, dtype=np.int32).reshape(1, 16) + offset + 1
            assert np.array_equal(answer.as_numpy("OUTPUT0"), expected), (round_, name)
    index = _index(http)
    assert all(index[name]["state"] == "READY" for name in POOL)
    assert index["m1"]["replicas"] == 1


def test_a_pools_memory_budget_applies_in_each_replica(http: httpclient.InferenceServerClient) -> None:
    """Ray keeps up to 2 models a replica of `budget_pool`, but the replicas' engines have a memory budget that
    fits one: loading the second unloads the first in the engine, behind Ray's back, and the first is loaded again
    when asked for, as on one server under a budget."""

    def ask(name: str, value: int) -> int:
        data = httpclient.InferInput("IN", [1], "INT32")
        data.set_data_from_numpy(np.array([value], dtype=np.int32))
        return int(http.infer(name, [data]).as_numpy("OUT")[0])

    def loaded(name: str) -> bool:  # a model's statistics are its loaded versions'
        return bool(http.get_inference_statistics(name)["model_stats"])

    assert ask("big1", 1) == 1
    assert ask("big2", 2) == 2
    _until(lambda: loaded("big2") and not loaded("big1"), 30, "big1 unloaded for big2 by the engine's budget")
    assert ask("big1", 3) == 3
    _until(lambda: loaded("big1") and not loaded("big2"), 30, "big2 unloaded for big1")


def test_statistics_and_metrics_sum_the_replicas(
    cluster: RunningServer, http: httpclient.InferenceServerClient
) -> None:
    for _ in range(5):
        http.infer("b", _simple_inputs(httpclient))

    def counted() -> bool:
        stats = http.get_inference_statistics("b")["model_stats"]
        return bool(stats) and int(stats[0]["inference_count"]) >= 5

    _until(counted, 15, "b's five inferences in its statistics")

    def metric() -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{cluster.metrics_port}/metrics", timeout=10) as page:
            for line in page.read().decode().splitlines():
                if line.startswith('nv_inference_request_success{model="b",version="1"}'):
                    return float(line.rsplit(" ", 1)[1])
        return 0.0

    assert metric() >= 5
    with pytest.raises(InferenceServerException) as e:
        http.get_inference_statistics("nope")
    assert e.value.status() == "404"


def test_unload_one_model_leaves_the_others(http: httpclient.InferenceServerClient) -> None:
    http.unload_model("a")
    with pytest.raises(InferenceServerException) as e:
        http.infer("a", _simple_inputs(httpclient))
    assert e.value.status() == "404"
    assert http.infer("b", _simple_inputs(httpclient)).as_numpy("OUTPUT0") is not None
    assert "state" not in _index(http)["a"]
    http.load_model("a")
    assert http.infer("a", _simple_inputs(httpclient)).get_response()["model_name"] == "a"
    with pytest.raises(InferenceServerException) as e:
        http.load_model("not_in_the_repository")
    assert "model not found in any model repository" in str(e.value)


def test_a_rolling_update_under_load_fails_no_request(
    cluster: RunningServer, http: httpclient.InferenceServerClient
) -> None:
    """Loading a loaded model again replaces its deployment's replicas (new ones first); requests keep coming
    and every one is answered."""
    stop = threading.Event()
    answered: list[int] = []
    failures: list[BaseException] = []

    def load() -> None:
        client = httpclient.InferenceServerClient(cluster.http_url, network_timeout=60)
        while not stop.is_set():
            try:
                client.infer("b", _simple_inputs(httpclient))
                answered.append(1)
            except InferenceServerException as e:
                failures.append(e)
        client.close()

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        _until(lambda: len(answered) > 20, 30, "traffic on b")
        http.load_model("b")  # returns once the new replica runs
        before = len(answered)
        _until(lambda: len(answered) > before + 20, 30, "traffic on b after the update")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not failures, [str(f) for f in failures]


def test_shared_memory_is_refused_clearly(http: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as e:
        http.register_system_shared_memory("region", "/modelhost_ray_test", 64)
    assert "not available on a Ray cluster" in str(e.value)


@pytest.mark.parametrize("model", ["hot", "hot_queue"])
def test_one_model_scales_out_under_load_and_back(
    model: str, cluster: RunningServer, http: httpclient.InferenceServerClient
) -> None:
    """Load on a python model sleeping 50 ms a request: its deployment grows to 2 replicas while `b` stays at 1,
    and shrinks back once idle; `hot` scales on its engines' ongoing requests, `hot_queue` on their queue time
    (its target 20 ms; 8 clients on 2 instances wait about 150 ms)."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def load() -> None:
        client = httpclient.InferenceServerClient(cluster.http_url, network_timeout=60)
        data = httpclient.InferInput("INPUT0", [4], "FP32")
        data.set_data_from_numpy(np.ones(4, dtype=np.float32))
        delay = httpclient.InferInput("DELAY_MS", [1], "INT32")
        delay.set_data_from_numpy(np.array([50], dtype=np.int32))
        try:
            while not stop.is_set():
                client.infer(model, [data, delay])
        except BaseException as e:
            failures.append(e)
        finally:
            client.close()

    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    try:
        _until(lambda: _index(http)[model].get("replicas") == 2, 90, f"{model} at 2 replicas under load")
        assert _index(http)["b"]["replicas"] == 1
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not failures, failures
    _until(lambda: _index(http)[model].get("replicas") == 1, 90, f"{model} back at 1 replica once idle")


def _delayed(delay_ms: int) -> list[httpclient.InferInput]:
    data = httpclient.InferInput("INPUT0", [4], "FP32")
    data.set_data_from_numpy(np.ones(4, dtype=np.float32))
    delay = httpclient.InferInput("DELAY_MS", [1], "INT32")
    delay.set_data_from_numpy(np.array([delay_ms], dtype=np.int32))
    return [data, delay]


def _replica_pids(deployment: str) -> list[int]:
    """The processes of a deployment's replicas (Ray names them ray::ServeReplica:<application>:<deployment>)."""
    found = subprocess.run(
        ["pgrep", "-f", f"ServeReplica:{deployment}:models"], capture_output=True, text=True
    )
    return [int(pid) for pid in found.stdout.split()]


def test_a_killed_replica_fails_only_its_requests_and_is_replaced(
    cluster: RunningServer, http: httpclient.InferenceServerClient
) -> None:
    (pid,) = _replica_pids(VICTIM)
    outcome: list[Any] = []

    def slow() -> None:
        client = httpclient.InferenceServerClient(cluster.http_url, network_timeout=60)
        try:
            outcome.append(client.infer(VICTIM, _delayed(5000)))
        except InferenceServerException as e:
            outcome.append(e)
        finally:
            client.close()

    thread = threading.Thread(target=slow)
    thread.start()
    time.sleep(1.0)  # the request is in the replica, sleeping
    os.kill(pid, signal.SIGKILL)
    thread.join(60)
    (failed,) = outcome
    assert isinstance(failed, InferenceServerException), failed
    # Over modelhost's link to the replica (the inference path once the replica has reported its address).
    assert failed.status() == "503" and "did not answer: its replica went away" in str(failed)
    assert http.infer("b", _simple_inputs(httpclient)).as_numpy("OUTPUT0") is not None  # the others serve

    def replaced() -> bool:
        try:
            return http.infer(VICTIM, _delayed(0)).as_numpy("OUTPUT0") is not None
        except InferenceServerException:
            return False

    _until(replaced, 120, "the victim served again by a new replica")
    assert _replica_pids(VICTIM) != [pid]


def _start_attached(head: str, repository: Path, log_path: Path, *args: str) -> RunningServer:
    """A second ingress, attached to the deployments the cluster has (as beside a RayService)."""
    port, grpc_port = free_ports(2)
    command = [
        sys.executable,
        "-m",
        "modelhost",
        "ray",
        "serve",
        "--attach=true",
        f"--model-repository={repository}",
    ]
    command += [
        f"--address={head}",
        f"--http-port={port}",
        f"--grpc-port={grpc_port}",
        "--allow-metrics=false",
    ]
    command += ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--strict-readiness=false", *args]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=RAY_ENV)
    return RunningServer(process, port, grpc_port, 0, log_path)


def test_the_ingress_takes_tls_and_restricted_apis_as_modelhost_serve(
    head: str, repository: Path, cluster: RunningServer, tmp_path: Path
) -> None:
    """`modelhost serve`'s TLS and restricted-API flags on the ingress's ports (here an attached one's)."""
    authority = CertificateAuthority(tmp_path, "ca")
    pem = authority.issue("server")
    tls = ["--http-use-ssl=true", "--grpc-use-ssl=true"]
    tls += [
        f"--{port}-server-{part}={getattr(pem, part)}"
        for port in ("http", "grpc")
        for part in ("cert", "key")
    ]
    restricted = [
        "--http-restricted-api=model-repository:admin-key=s3cret",
        "--grpc-restricted-protocol=model-repository:admin-key=s3cret",
    ]
    deployments = f"--deployments={cluster.log_path.parent / 'deployments.yaml'}"
    secure = _start_attached(head, repository, tmp_path / "secure.log", deployments, *tls, *restricted)
    https = httpclient.InferenceServerClient(
        f"localhost:{secure.http_port}", ssl=True, ssl_options={"ca_certs": str(authority.pem.cert)}
    )
    grpcs = grpcclient.InferenceServerClient(
        f"localhost:{secure.grpc_port}", ssl=True, root_certificates=str(authority.pem.cert)
    )
    try:

        def ready() -> bool:
            assert secure.process.poll() is None, secure.log()
            try:
                return bool(https.is_server_ready())
            except Exception:  # not listening yet
                return False

        _until(ready, 120, "the TLS ingress ready")
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        assert np.array_equal(https.infer("simple", _simple_inputs(httpclient)).as_numpy("OUTPUT0"), a + 1)
        assert np.array_equal(grpcs.infer("simple", _simple_inputs(grpcclient)).as_numpy("OUTPUT0"), a + 1)
        with pytest.raises(InferenceServerException) as e:
            https.get_model_repository_index()
        assert "This API is restricted, expecting header 'admin-key'" in str(e.value)
        assert https.get_model_repository_index(headers={"admin-key": "s3cret"})
        with pytest.raises(InferenceServerException) as e:
            grpcs.get_model_repository_index()
        assert e.value.status() == "StatusCode.UNAVAILABLE" and "This protocol is restricted" in str(e.value)
        assert grpcs.get_model_repository_index(headers={"triton-grpc-protocol-admin-key": "s3cret"}).models
        assert not _http_ok(secure.http_port, "/v2/health/live")  # no cleartext on the TLS port
    finally:
        https.close()
        grpcs.close()
        assert secure.stop(signal.SIGTERM, timeout=120) == 0, secure.log()


def test_an_attached_ingress_serves_deployments_made_by_others(
    head: str, repository: Path, cluster: RunningServer, http: httpclient.InferenceServerClient
) -> None:
    """A second ingress with --attach (as beside a RayService) routes to the first one's deployments, refuses
    model control, and deletes nothing when it stops. It has no link token: Ray's handles carry its requests."""
    deployments = cluster.log_path.parent / "deployments.yaml"
    attached = _start_attached(
        head, repository, cluster.log_path.parent / "attached.log", f"--deployments={deployments}"
    )
    process, port = attached.process, attached.http_port
    try:
        _until(
            lambda: _http_ok(port, "/v2/health/ready") or process.poll() is not None, 120, "attached ready"
        )
        assert process.poll() is None, attached.log()
        client = httpclient.InferenceServerClient(attached.http_url, network_timeout=60)
        answer = client.infer("simple", _simple_inputs(httpclient))
        assert np.array_equal(answer.as_numpy("OUTPUT1"), np.arange(16, dtype=np.int32).reshape(1, 16) - 1)
        assert client.infer("m3", _simple_inputs(httpclient)).get_response()["model_name"] == "m3"
        with pytest.raises(InferenceServerException) as e:
            client.unload_model("simple")
        assert "managed by whoever deployed them" in str(e.value)
        assert "MODELHOST_LINK_TOKEN is not set" in attached.log()
        client.close()
    finally:
        assert attached.stop(signal.SIGTERM, timeout=60) == 0, attached.log()
    assert http.infer("simple", _simple_inputs(httpclient)).as_numpy("OUTPUT0") is not None  # still deployed


def test_modelhost_tune_url_tunes_a_model_on_the_cluster(
    cluster: RunningServer, http: httpclient.InferenceServerClient, tmp_path: Path
) -> None:
    """Each variant is a load with a config override: a rolling update of the model's deployment alone."""
    before = http.get_model_config("tuned")
    output = tmp_path / "out"
    run = subprocess.run(
        [
            sys.executable, "-m", "modelhost", "tune", "-m", "tuned", "--url", cluster.http_url,
            "--metrics-url", f"http://127.0.0.1:{cluster.metrics_port}/metrics", "--time-limit", "120s",
            "--output", str(output), "--max-instance-count=1", "--max-model-batch-size=2", "--max-concurrency=2",
            "--measurement-interval=100", "--max-trials=3", "--search=brute", "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=RAY_ENV,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    with (output / "metrics-model-inference.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    # Three variants (one instance, batch sizes up to 2), each a rolling update: the search ends by itself, well
    # within the limit, which only bounds it. At least one was loaded and measured.
    assert rows and all(row["Model Config Path"] for row in rows), rows
    assert all(float(row["Throughput (infer/sec)"]) > 0 for row in rows)
    assert text_format.Parse((output / "config.pbtxt").read_text(), ModelConfig()).name == "tuned"
    assert http.get_model_config("tuned") == before  # given back its config at the end
    assert http.is_model_ready("tuned")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_modelhost_perf_measures_through_the_cluster(
    cluster: RunningServer, protocol: str, tmp_path: Path
) -> None:
    url = cluster.http_url if protocol == "http" else cluster.grpc_url
    short = [
        "-p",
        "300",
        "-r",
        "3",
        "--processes",
        "1",
        "--concurrency-range",
        "2",
        "-f",
        str(tmp_path / "p.csv"),
    ]
    out = subprocess.run(
        [sys.executable, "-m", "modelhost", "perf", "-m", "simple", "-u", url, "-i", protocol, *short],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = (tmp_path / "p.csv").read_text().splitlines()
    assert rows[1].split(",")[0] == "2" and float(rows[1].split(",")[1]) > 0  # concurrency, inferences/s


def test_a_stop_deletes_what_the_ingress_deployed(head: str, cluster: RunningServer) -> None:
    assert cluster.stop(signal.SIGTERM, timeout=120) == 0, cluster.log()
    assert "stopping: deleting" in cluster.log()
    left = subprocess.run(
        [
            sys.executable,
            "-c",
            "import ray; from ray import serve; "
            f"ray.init(address='{head}', log_to_driver=False); print(sorted(serve.status().applications))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=RAY_ENV,
    )
    assert left.stdout.strip().splitlines()[-1] == "[]", left.stdout + left.stderr


def test_the_head_going_away_stops_the_ingress_with_an_error(
    head: str, repository: Path, cluster: RunningServer
) -> None:
    """Last: it stops the cluster. An ingress attached to the (now empty) cluster exits with an error."""
    orphan = _start_attached(head, repository, cluster.log_path.parent / "orphan.log")
    process, port = orphan.process, orphan.http_port
    try:
        _until(lambda: _http_ok(port, "/v2/health/live") or process.poll() is not None, 120, "attached live")
        assert process.poll() is None, orphan.log()
        subprocess.run([RAY, "stop", "--force"], capture_output=True, timeout=120, env=RAY_ENV)
        try:
            code = process.wait(60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the ingress hangs without its cluster:\n{orphan.log()}") from None
        assert code == 1
        assert "lost the Ray cluster" in orphan.log()
    finally:
        if process.poll() is None:
            orphan.stop(signal.SIGKILL)
