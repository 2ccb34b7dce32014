"""Health, metadata, config, repository index and metrics over HTTP, as tritonclient and curl see them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from e2e.server_process import RunningServer


@pytest.fixture(scope="module")
def client(server: RunningServer, frontend_processes: int) -> httpclient.InferenceServerClient:
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


def test_trace_settings_without_tracing_configured(client: httpclient.InferenceServerClient) -> None:
    assert client.get_trace_settings()["trace_level"] == ["OFF"]
    # Turning tracing on needs a trace file, which only the command line may name (Triton's words).
    with pytest.raises(InferenceServerException, match="trace file name is not given") as e:
        client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
    assert e.value.status() == "400"


def _simple_inputs(batch: int) -> list[httpclient.InferInput]:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [batch, 16], "INT32")
        tensor.set_data_from_numpy(np.ones((batch, 16), dtype=np.int32))
        inputs.append(tensor)
    return inputs


def test_statistics(client: httpclient.InferenceServerClient) -> None:
    def stats() -> dict[str, Any]:
        found = client.get_inference_statistics("simple")["model_stats"]
        assert len(found) == 1
        return found[0]

    before = stats()
    client.infer("simple", _simple_inputs(1))
    client.infer("simple", _simple_inputs(3))
    with pytest.raises(InferenceServerException):
        client.infer("simple", _simple_inputs(9))  # over max_batch_size: fails before execution
    after = stats()
    assert after["name"] == "simple"
    assert after["version"] == "1"
    assert after["inference_count"] - before["inference_count"] == 4
    assert after["execution_count"] - before["execution_count"] == 2
    inference = after["inference_stats"]
    assert inference["success"]["count"] - before["inference_stats"]["success"]["count"] == 2
    assert inference["fail"]["count"] - before["inference_stats"]["fail"]["count"] == 1
    for key in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert inference[key]["count"] == inference["success"]["count"]
        assert inference[key]["ns"] > 0
    assert inference["success"]["ns"] >= inference["compute_infer"]["ns"]
    assert set(inference) == {
        "success",
        "fail",
        "queue",
        "compute_input",
        "compute_infer",
        "compute_output",
        "cache_hit",
        "cache_miss",
    }
    sizes = {b["batch_size"]: b for b in after["batch_stats"]}
    assert sizes[3]["compute_infer"]["count"] >= 1
    assert after["last_inference"] > 1_700_000_000_000  # milliseconds since the epoch
    every = client.get_inference_statistics()["model_stats"]
    assert {"simple", "mlp", "versions_all"} <= {s["name"] for s in every}
    assert [s["version"] for s in every if s["name"] == "versions_all"] == ["1", "2", "3"]
    assert client.get_inference_statistics("versions_all", "2")["model_stats"][0]["version"] == "2"
    with pytest.raises(InferenceServerException, match="Request for unknown model: 'nope' is not found") as e:
        client.get_inference_statistics("nope")
    assert e.value.status() == "404"


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
            if line.startswith("nv_inference") and 'model="simple",' in line and "reason" not in line:
                name, value = line.rsplit(" ", 1)
                found[name.split("{")[0]] = float(value)
        return found

    before = counts()
    for _ in range(3):
        client.infer("simple", inputs)
    after = counts()
    assert after["nv_inference_request_success"] - before.get("nv_inference_request_success", 0) == 3
    assert after["nv_inference_count"] - before.get("nv_inference_count", 0) == 6
    assert after["nv_inference_exec_count"] - before.get("nv_inference_exec_count", 0) == 3
    for family in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert f"nv_inference_{family}_duration_us" in after
