"""PyTorch instances on a GPU, through tritonclient: KIND_GPU runs the model and its inputs on cuda:0, KIND_MODEL
keeps the placement the model's file has (here its weights on the GPU), KIND_CPU stays on the CPU; the GPU memory a
model takes shows in its statistics; --model-load-gpu-limit refuses a load once the GPU is fuller than the limit."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from backends.pytorch.torch_test_models import save, script
from e2e import server_process
from e2e.server_process import RunningServer, running_server

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

WEIGHT_ELEMENTS = 64 << 20  # 256 MiB of FP32 weights: the GPU memory the big model takes, at least


class DeviceReport(torch.nn.Module):  # type: ignore[misc]
    """forward(x) -> (x * 2, [weights on a GPU, x on a GPU where the model computed]). The model moves its input
    to where its weights are, as a KIND_MODEL model that places itself must."""

    def __init__(self, elements: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.full((elements,), 2.0), requires_grad=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        given_on_gpu = x.is_cuda
        x = x.to(self.weight.device)
        where = torch.tensor([int(self.weight.is_cuda), int(given_on_gpu)], dtype=torch.int64)
        return x * self.weight[: x.shape[-1]], where


def _add(repo: Path, name: str, kind: str, *, elements: int = 16, on_gpu_file: bool = False) -> None:
    module = DeviceReport(elements)
    if on_gpu_file:
        module = module.cuda()
    save(script(module), repo / name / "1" / "model.pt")
    (repo / name / "config.pbtxt").write_text(
        f"""
platform: "pytorch_libtorch"
max_batch_size: 0
input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [
  {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ -1 ] }},
  {{ name: "OUTPUT__1" data_type: TYPE_INT64 dims: [ 2 ] }}
]
instance_group [ {{ count: 1 kind: {kind} }} ]
"""
    )


@pytest.fixture(scope="module", autouse=True)
def frontend_processes() -> Iterator[int]:
    server_process.frontend_processes = 0
    yield 0


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gpu_torch")
    _add(root, "on_gpu", "KIND_GPU")
    _add(root, "placed_by_file", "KIND_MODEL", on_gpu_file=True)
    _add(root, "on_cpu", "KIND_CPU")
    _add(root, "big_on_gpu", "KIND_GPU", elements=WEIGHT_ELEMENTS)
    return root


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with running_server([repo], tmp_path_factory.mktemp("log") / "server.log") as running:
        yield running


def _infer(server: RunningServer, model: str) -> tuple[np.ndarray, list[int]]:
    client = httpclient.InferenceServerClient(server.http_url)
    x = np.array([1.0, -2.0, 3.5], dtype=np.float32)
    tensor = httpclient.InferInput("INPUT__0", [3], "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer(model, [tensor])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), x * 2)
    return result.as_numpy("OUTPUT__0"), result.as_numpy("OUTPUT__1").tolist()


def test_kind_gpu_instances_run_on_cuda(server: RunningServer) -> None:
    # Weights and inputs on cuda:0: the backend placed both.
    assert _infer(server, "on_gpu")[1] == [1, 1]


def test_kind_model_keeps_the_files_placement(server: RunningServer) -> None:
    # Weights where the file put them (the GPU), inputs given on the CPU (the model moves them itself).
    assert _infer(server, "placed_by_file")[1] == [1, 0]


def test_kind_cpu_stays_on_the_cpu(server: RunningServer) -> None:
    assert _infer(server, "on_cpu")[1] == [0, 0]


def test_a_models_gpu_memory_is_in_its_statistics(server: RunningServer) -> None:
    stats = httpclient.InferenceServerClient(server.http_url).get_inference_statistics("big_on_gpu")
    usage = stats["model_stats"][0]["memory_usage"]
    gpu = [u for u in usage if u["type"] == "GPU"]
    assert [u["id"] for u in gpu] == [0], usage
    assert gpu[0]["byte_size"] >= WEIGHT_ELEMENTS * 4, usage  # its weights at least (and its CUDA context)


def _index(server: RunningServer) -> dict[str, Any]:
    request = urllib.request.Request(f"http://{server.http_url}/v2/repository/index", data=b"{}")
    with urllib.request.urlopen(request, timeout=10) as response:
        return {entry["name"]: entry for entry in json.loads(response.read())}


def test_model_load_gpu_limit_refuses_a_load_over_the_limit(repo: Path, tmp_path: Path) -> None:
    # A limit of 0 on GPU 0: the memory the instance itself takes is over it; KIND_CPU models are not checked.
    args = (
        "--model-load-gpu-limit=0:0",
        "--model-control-mode=explicit",
        "--load-model=on_gpu",
        "--load-model=on_cpu",
        "--exit-on-error=false",
        "--strict-readiness=false",
    )
    with running_server([repo], tmp_path / "server.log", *args) as limited:
        index = _index(limited)
    assert index["on_gpu"]["state"] == "UNAVAILABLE"
    assert (
        "can not create model 'on_gpu_0_0': memory limit set for GPU 0 has exceeded"
        in index["on_gpu"]["reason"]
    )
    assert index["on_cpu"]["state"] == "READY"
