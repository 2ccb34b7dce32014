"""Health, metadata, config, repository index and metrics over HTTP, as tritonclient and curl see them."""

from __future__ import annotations

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from e2e.server_process import RunningServer


@pytest.fixture(scope="module")
def client(server: RunningServer) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.http_url)


def test_health(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("simple")
    assert not client.is_model_ready("nope")


def test_server_metadata(client: httpclient.InferenceServerClient) -> None:
    meta = client.get_server_metadata()
    assert meta["name"] == "triton"
    assert meta["version"]
    assert set(meta["extensions"]) >= {"classification", "binary_tensor_data", "model_configuration"}


def test_model_metadata(client: httpclient.InferenceServerClient) -> None:
    meta = client.get_model_metadata("simple")
    assert meta == {
        "name": "simple",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]},
            {"name": "INPUT1", "datatype": "INT32", "shape": [-1, 16]},
        ],
        "outputs": [
            {"name": "OUTPUT0", "datatype": "INT32", "shape": [-1, 16]},
            {"name": "OUTPUT1", "datatype": "INT32", "shape": [-1, 16]},
        ],
    }
    assert client.get_model_metadata("versions_all", "2")["versions"] == ["1", "2", "3"]


def test_autocompleted_config(client: httpclient.InferenceServerClient) -> None:
    config = client.get_model_config("identity_fp32")
    assert config["platform"] == "onnxruntime_onnx"
    assert config["backend"] == "onnxruntime"
    assert config["max_batch_size"] == 4
    assert config["input"][0] == {
        "name": "INPUT0",
        "data_type": "TYPE_FP32",
        "format": "FORMAT_NONE",
        "dims": [-1],
        "is_shape_tensor": False,
        "allow_ragged_batch": False,
        "optional": False,
        "is_non_linear_format_io": False,
    }
    assert config["dynamic_batching"]["preferred_batch_size"] == [4]
    assert config["instance_group"] == [
        {
            "name": "identity_fp32",
            "kind": "KIND_CPU",
            "count": 2,
            "gpus": [],
            "secondary_devices": [],
            "profile": [],
            "passive": False,
            "host_policy": "",
        }
    ]
    assert config["version_policy"] == {"latest": {"num_versions": 1}}
    assert config["default_model_filename"] == "model.onnx"


def test_unknown_model_answers_404(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException, match="Request for unknown model: 'nope' is not found") as e:
        client.get_model_metadata("nope")
    assert e.value.status() == "404"


def test_repository_index(server: RunningServer) -> None:
    base = f"http://{server.http_url}"
    index = requests.post(f"{base}/v2/repository/index", timeout=5).json()
    assert {"name": "simple", "version": "1", "state": "READY"} in index
    ready = requests.post(f"{base}/v2/repository/index", json={"ready": True}, timeout=5).json()
    assert all(m["state"] == "READY" for m in ready)
    r = requests.post(f"{base}/v2/repository/other/index", timeout=5)
    assert r.status_code == 501
    assert r.json() == {"error": "'repository_name' specification is not supported"}


def test_load_unload_refused_in_none_mode(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException, match="explicit model load / unload is not allowed") as e:
        client.load_model("simple")
    assert e.value.status() == "503"


def test_extensions_not_yet_supported_say_so(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException, match="statistics extension is not supported yet") as e:
        client.get_inference_statistics("simple")
    assert e.value.status() == "501"


def test_metrics_count_requests(server: RunningServer, client: httpclient.InferenceServerClient) -> None:
    a = np.ones((2, 16), dtype=np.int32)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [2, 16], "INT32")
        tensor.set_data_from_numpy(a)
        inputs.append(tensor)

    def counts() -> dict[str, float]:
        text = requests.get(f"http://localhost:{server.metrics_port}/metrics", timeout=5).text
        found = {}
        for line in text.splitlines():
            if line.startswith("nv_inference") and 'model="simple"' in line and "reason" not in line:
                name, value = line.rsplit(" ", 1)
                found[name.split("{")[0]] = float(value)
        return found

    before = counts()
    for _ in range(3):
        client.infer("simple", inputs)
    after = counts()
    assert after["nv_inference_request_success"] - before.get("nv_inference_request_success", 0) == 3
    assert after["nv_inference_count"] - before.get("nv_inference_count", 0) == 6
