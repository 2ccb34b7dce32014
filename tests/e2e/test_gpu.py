"""KIND_GPU instances through ONNX Runtime's CUDA provider: run only where a GPU and onnxruntime-gpu are present
(the GPU check machine has the CPU build of onnxruntime: there they are skipped, and said so)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient

from e2e.models import add_identity
from e2e.server_process import running_server

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        "CUDAExecutionProvider" not in ort.get_available_providers(),
        reason="needs onnxruntime with CUDA (onnxruntime-gpu), and this onnxruntime has none",
    ),
]


def test_gpu_instance_serves(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    add_identity(repo, "gpu_identity", "FP32", extra="instance_group [ { count: 2 kind: KIND_GPU } ]")
    with running_server([repo], tmp_path / "server.log") as server:
        client = httpclient.InferenceServerClient(server.http_url)
        data = np.arange(8, dtype=np.float32).reshape(2, 4)
        tensor = httpclient.InferInput("INPUT0", [2, 4], "FP32")
        tensor.set_data_from_numpy(data)
        np.testing.assert_array_equal(client.infer("gpu_identity", [tensor]).as_numpy("OUTPUT0"), data)
        assert client.get_model_config("gpu_identity")["instance_group"][0]["kind"] == "KIND_GPU"
