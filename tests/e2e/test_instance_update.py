"""In-place instance updates through tritonclient: a reload that changes only `instance_group` adds and removes
instances of the serving version, as Triton's does (qa/L0_model_update), while requests go on being served.

The model (instance_models/counted.py) counts its instances' initialize and finalize calls in files of the test,
so each test reads how many instances were built and closed."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from e2e.server_process import RunningServer, running_server

# Served by the engine in every --frontend-processes mode: run in mode 0 alone (tests/e2e/conftest.py).
pytestmark = pytest.mark.engine_served

MODEL_SOURCE = Path(__file__).parent / "instance_models" / "counted.py"
R1_LIMIT = 10  # --rate-limit-resource=R1:10


class Counted:
    """A copy of the counting model in the repository, with the instance groups and extra config a test gives."""

    def __init__(self, repo: Path, name: str, tmp: Path) -> None:
        self.name = name
        self.dir = repo / name
        self.counts = tmp / name
        self.counts.mkdir()
        (self.dir / "1").mkdir(parents=True)
        shutil.copy(MODEL_SOURCE, self.dir / "1" / "model.py")

    def configure(self, groups: str, extra: str = "") -> None:
        self.dir.joinpath("config.pbtxt").write_text(
            f'name: "{self.name}"\nbackend: "python"\nmax_batch_size: 0\n'
            'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
            'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
            f'parameters {{ key: "count_dir" value: {{ string_value: "{self.counts}" }} }}\n'
            f"instance_group [ {groups} ]\n{extra}"
        )

    def count(self, kind: str) -> int:
        path = self.counts / kind
        return int(path.read_text() or "0") if path.exists() else 0

    def hold_initialize(self, held: bool) -> None:
        gate = self.counts / "hold_initialize"
        if held:
            gate.touch()
        else:
            gate.unlink()


def cpu(count: int, name: str = "", resources: str = "") -> str:
    named = f'name: "{name}" ' if name else ""
    limited = f"rate_limiter {{ resources [ {resources} ] }} " if resources else ""
    return f"{{ {named}count: {count} kind: KIND_CPU {limited}}}"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("instance_update")


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("logs") / "instance_update.log"
    with running_server(
        [repo],
        log,
        "--model-control-mode=explicit",
        "--rate-limit=execution_count",
        f"--rate-limit-resource=R1:{R1_LIMIT}",
        "--log-verbose=1",
    ) as running:
        yield running


@pytest.fixture
def client(server: RunningServer) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    yield client
    client.close()


@pytest.fixture
def model(repo: Path, tmp_path: Path, request: pytest.FixtureRequest) -> Counted:
    test, _, mode = request.node.name.removeprefix("test_").partition("[")
    return Counted(repo, f"{test[:40]}_{mode.rstrip(']')}", tmp_path)


def infer(client: grpcclient.InferenceServerClient, name: str, **sequence: int | bool) -> None:
    data = np.arange(3, dtype=np.float32)
    inp = grpcclient.InferInput("INPUT0", [3], "FP32")
    inp.set_data_from_numpy(data)
    result = client.infer(name, [inp], **sequence)  # type: ignore[arg-type]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def eventually(check: Callable[[], bool], timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


class Traffic:
    """Requests sent back to back from a thread of their own while a test changes the model."""

    def __init__(self, server: RunningServer, name: str) -> None:
        self.errors: list[str] = []
        self.answered = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(server, name))
        self._thread.start()

    def _run(self, server: RunningServer, name: str) -> None:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            while not self._stop.is_set():
                try:
                    infer(client, name)
                    self.answered += 1
                except InferenceServerException as e:
                    self.errors.append(str(e))
        finally:
            client.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def test_instances_are_added_and_removed_while_requests_are_served(
    server: RunningServer, client: grpcclient.InferenceServerClient, model: Counted
) -> None:
    model.configure(cpu(2))
    client.load_model(model.name)
    assert (model.count("initialize"), model.count("finalize")) == (2, 0)
    traffic = Traffic(server, model.name)
    try:
        model.configure(cpu(3))
        client.load_model(model.name)
        # One instance more; none of the serving ones was closed.
        assert (model.count("initialize"), model.count("finalize")) == (3, 0)
        model.configure(cpu(1))
        client.load_model(model.name)
        # Two fewer, closed (finalized) by the time the load answers.
        assert (model.count("initialize"), model.count("finalize")) == (3, 2)
        answered = traffic.answered
        assert eventually(lambda: traffic.answered > answered)
    finally:
        traffic.stop()
    assert traffic.errors == []
    config = client.get_model_config(model.name, as_json=True)["config"]
    assert [g["count"] for g in config["instance_group"]] == [1]
    client.unload_model(model.name)
    assert eventually(lambda: model.count("finalize") == 3)


def test_renamed_and_reordered_groups_change_no_instance(
    client: grpcclient.InferenceServerClient, model: Counted
) -> None:
    model.configure(f"{cpu(1, 'first')}, {cpu(2, 'second')}")
    client.load_model(model.name)
    model.configure(cpu(3, "all"))
    client.load_model(model.name)
    assert (model.count("initialize"), model.count("finalize")) == (3, 0)
    config = client.get_model_config(model.name, as_json=True)["config"]
    assert [g["name"] for g in config["instance_group"]] == ["all"]
    infer(client, model.name)
    client.unload_model(model.name)


def test_a_change_besides_the_instance_groups_loads_the_version_anew(
    client: grpcclient.InferenceServerClient, model: Counted
) -> None:
    model.configure(cpu(2))
    client.load_model(model.name)
    model.configure(cpu(1), 'parameters { key: "other" value: { string_value: "x" } }\n')
    client.load_model(model.name)
    assert model.count("initialize") == 3
    assert eventually(lambda: model.count("finalize") == 2)  # both old instances, once their requests end
    infer(client, model.name)
    client.unload_model(model.name)


def test_requests_are_served_while_a_new_instance_initializes(
    client: grpcclient.InferenceServerClient, model: Counted
) -> None:
    model.configure(cpu(1))
    client.load_model(model.name)
    model.configure(cpu(2))
    model.hold_initialize(True)
    loading = threading.Thread(target=client.load_model, args=(model.name,))
    loading.start()
    try:
        for _ in range(3):
            infer(client, model.name)  # the serving instance answers while the new one waits in initialize
        assert loading.is_alive()
        assert model.count("initialize") == 1
    finally:
        model.hold_initialize(False)
        loading.join()
    assert (model.count("initialize"), model.count("finalize")) == (2, 0)
    client.unload_model(model.name)


def test_an_update_the_rate_limiter_cannot_serve_fails_and_the_old_instances_serve_on(
    server: RunningServer, client: grpcclient.InferenceServerClient, model: Counted
) -> None:
    model.configure(cpu(1, resources='{ name: "R1" count: 2 }'))
    client.load_model(model.name)
    model.configure(cpu(1, resources=f'{{ name: "R1" count: {R1_LIMIT + 22} }}'))
    with pytest.raises(InferenceServerException, match=f'Resource count for "R1" is limited to {R1_LIMIT}'):
        client.load_model(model.name)
    infer(client, model.name)
    config = client.get_model_config(model.name, as_json=True)["config"]
    assert config["instance_group"][0]["rate_limiter"]["resources"][0]["count"] == 2
    # A change of resources is a new instance in place of the old one.
    before = (model.count("initialize"), model.count("finalize"))
    model.configure(cpu(1, resources=f'{{ name: "R1" count: {R1_LIMIT} }}'))
    client.load_model(model.name)
    assert (model.count("initialize"), model.count("finalize")) == (before[0] + 1, before[1] + 1)
    infer(client, model.name)
    # tritonserver's verbose account of the limits, after the change (escaped: one record per line)
    assert f"Resource: R1\\t Count: {R1_LIMIT}" in server.log_path.read_text()
    client.unload_model(model.name)


def test_a_removed_instance_serves_its_sequences_to_their_end(
    client: grpcclient.InferenceServerClient, model: Counted
) -> None:
    sequence_batching = "sequence_batching { direct { } max_sequence_idle_microseconds: 60000000 }\n"
    model.configure(cpu(2), sequence_batching)
    client.load_model(model.name)
    # One slot per instance: each sequence holds one instance.
    infer(client, model.name, sequence_id=1, sequence_start=True)
    infer(client, model.name, sequence_id=2, sequence_start=True)
    model.configure(cpu(1), sequence_batching)
    client.load_model(model.name)
    assert model.count("finalize") == 0  # the leaving instance still holds a sequence
    infer(client, model.name, sequence_id=1)
    infer(client, model.name, sequence_id=2)
    infer(client, model.name, sequence_id=1, sequence_end=True)
    infer(client, model.name, sequence_id=2, sequence_end=True)
    assert eventually(lambda: model.count("finalize") == 1)
    infer(client, model.name, sequence_id=3, sequence_start=True, sequence_end=True)
    client.unload_model(model.name)
    assert eventually(lambda: model.count("finalize") == 2)
