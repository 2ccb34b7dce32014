"""GPU tensors in the python backend, on a GPU: a model that returns torch CUDA tensors (as a DLPack producer
and as a capsule), inputs given on the GPU with FORCE_CPU_ONLY_INPUT_TENSORS "no" (and on the host without it),
and BLS passing a CUDA tensor to another model with its answer asked on the GPU. The models
(tests/e2e/python_gpu_models) check inside `execute` what they are given and answer with what they saw."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from e2e import server_process
from e2e.clients import Api
from e2e.server_process import RunningServer, running_server

pytestmark = pytest.mark.gpu
MODELS = Path(__file__).parent / "python_gpu_models"
X = np.array([1.0, 2.5, -3.0], dtype=np.float32)


@pytest.fixture(scope="module", autouse=True)
def frontend_processes() -> Iterator[int]:
    """The python backend runs in the engine whatever the frontend mode: one server, single process."""
    server_process.frontend_processes = 0
    yield 0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("gpu_python") / "models"
    shutil.copytree(MODELS, repo, ignore=shutil.ignore_patterns("*.md", "__pycache__"))
    with running_server([repo], tmp_path_factory.mktemp("log") / "server.log") as running:
        yield running


@pytest.fixture(params=["http", "grpc"])
def api(request: pytest.FixtureRequest, server: RunningServer) -> Iterator[Api]:
    if request.param == "http":
        yield Api("http", httpclient, httpclient.InferenceServerClient(server.http_url))
    else:
        yield Api("grpc", grpcclient, grpcclient.InferenceServerClient(server.grpc_url))


def test_a_model_returns_torch_cuda_tensors(api: Api) -> None:
    result = api.infer("gpu_double", INPUT0=X)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), X * 2)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT2"), X * 2)
    # [input on the CPU, both outputs on the GPU, as_numpy() of a GPU output refused]
    assert result.as_numpy("CHECKS").tolist() == [1, 1, 1]


def test_force_cpu_only_input_tensors_no_gives_inputs_on_the_gpu(api: Api) -> None:
    result = api.infer("gpu_inputs", INPUT0=X)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), X + 1)
    assert result.as_numpy("ON_GPU").tolist() == [1]


def test_by_default_inputs_are_on_the_host(api: Api) -> None:
    result = api.infer("gpu_default_inputs", INPUT0=X)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), X)
    assert result.as_numpy("ON_GPU").tolist() == [0]


def test_bls_passes_gpu_tensors_and_answers_on_the_preferred_gpu(api: Api) -> None:
    result = api.infer("gpu_bls", INPUT0=X)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), X + 1)
    assert result.as_numpy("ON_GPU").tolist() == [1]
