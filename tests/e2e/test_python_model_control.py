"""Model control from a python model (pb_utils.load_model / unload_model / is_model_ready), in explicit mode:
from `initialize`, where a model loads the models it calls (Triton's L0_backend_python bls_model_loading), and
from `execute`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from e2e.models import copy_examples
from e2e.server_process import RunningServer, running_server

LOADER = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Loads `simple` in initialize and calls it; a request with UNLOAD true unloads it."""

    def initialize(self, args):
        pb_utils.load_model("simple")
        if not pb_utils.is_model_ready("simple"):
            raise pb_utils.TritonModelException("simple is not ready after its load")

    def execute(self, requests):
        responses = []
        for request in requests:
            if pb_utils.get_input_tensor_by_name(request, "UNLOAD").as_numpy().any():
                pb_utils.unload_model("simple")
                ready = pb_utils.is_model_ready("simple")
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", np.array([int(ready)], np.int32))]))
                continue
            x = np.arange(16, dtype=np.int32).reshape(1, 16)
            call = pb_utils.InferenceRequest(
                model_name="simple",
                requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.Tensor("INPUT0", x), pb_utils.Tensor("INPUT1", x)],
            )
            answer = call.exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            total = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy().sum()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", np.array([total], np.int32))]))
        return responses
'''

LOADER_CONFIG = """
name: "loader"
backend: "python"
max_batch_size: 0
input [ { name: "UNLOAD" data_type: TYPE_BOOL dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def _python_model(repo: Path, name: str, config: str, code: str) -> Path:
    """A python model folder: config.pbtxt and 1/model.py."""
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    (repo / name / "1" / "model.py").write_text(code)
    return repo / name


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("control_repo")
    copy_examples(repo, "simple")
    _python_model(repo, "loader", LOADER_CONFIG, LOADER)
    with running_server(
        [repo],
        Path(tmp_path_factory.mktemp("log")) / "s.log",
        "--model-control-mode=explicit",
        "--load-model=loader",
    ) as s:
        yield s


def _call(http: httpclient.InferenceServerClient, unload: bool) -> int:
    flag = httpclient.InferInput("UNLOAD", [1], "BOOL")
    flag.set_data_from_numpy(np.array([unload]))
    result = http.infer("loader", [flag]).as_numpy("SUM")
    assert result is not None
    return int(result[0])


def test_a_model_loads_what_it_calls_from_initialize_and_unloads_it_from_execute(
    server: RunningServer,
) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    assert http.is_model_ready("loader")
    assert http.is_model_ready("simple")  # loaded by loader's initialize
    assert _call(http, unload=False) == 2 * sum(range(16))  # simple's OUTPUT0 = INPUT0 + INPUT1
    assert _call(http, unload=True) == 0  # not ready once unloaded
    assert not http.is_model_ready("simple")
    assert http.is_model_ready("loader")


RENDEZVOUS = '''
import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Each instance's initialize waits for the other's to have begun: it completes only when the instances are
    built at the same time."""

    def initialize(self, args):
        here = os.path.dirname(__file__)
        open(os.path.join(here, "began_" + args["model_instance_name"]), "w").close()
        deadline = time.monotonic() + 20
        while len([f for f in os.listdir(here) if f.startswith("began_")]) < 2:
            if time.monotonic() > deadline:
                raise pb_utils.TritonModelException("the other instance did not begin: built one at a time")
            time.sleep(0.05)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([]) for _ in requests]
'''


PAIR_CONFIG = (
    'backend: "python"\nmax_batch_size: 0\ninstance_group [ { count: 2 kind: KIND_CPU } ]\n'
    'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
)


def test_a_python_models_instances_initialize_at_the_same_time(tmp_path: Path) -> None:
    # As Triton, which builds the instances of backends declaring parallel loading at once (its L0_lifecycle
    # test_concurrent_model_instance_load_speedup).
    model = _python_model(tmp_path / "repo", "pair", PAIR_CONFIG, RENDEZVOUS)
    with running_server([tmp_path / "repo"], tmp_path / "s.log") as server:
        assert httpclient.InferenceServerClient(server.http_url).is_model_ready("pair")
        assert sorted(p.name for p in (model / "1").glob("began_*")) == ["began_pair_0_0", "began_pair_0_1"]


SLOW_INITIALIZE = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(8)  # longer than the stub timeout the test sets

    def execute(self, requests):
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""


ONE_INPUT_CONFIG = (
    'backend: "python"\nmax_batch_size: 0\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
)


def test_initialize_is_not_bounded_by_the_stub_timeout(tmp_path: Path) -> None:
    # As Triton: the stub timeout bounds the stub's start; the model's own initialize takes what it takes (its
    # bls_model_loading qa model runs unit tests there for minutes).
    _python_model(tmp_path / "repo", "slow_init", ONE_INPUT_CONFIG, SLOW_INITIALIZE)
    # 6 s: ample for the stub to start on a busy machine, which is all the timeout should bound.
    flags = ("--backend-config=python,stub-timeout-seconds=6",)
    with running_server([tmp_path / "repo"], tmp_path / "s.log", *flags) as server:
        assert httpclient.InferenceServerClient(server.http_url).is_model_ready("slow_init")
