"""Inference over gRPC through the official tritonclient: raw and typed contents, streaming, large messages."""

from __future__ import annotations

import queue
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc

from e2e.server_process import RunningServer


@pytest.fixture(scope="module")
def client(server: RunningServer, frontend_processes: int) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(server.grpc_url)


def _input(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def test_health_and_metadata(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("simple")
    assert not client.is_model_ready("no_such_model")
    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "triton"
    assert "binary_tensor_data" in meta["extensions"]
    model = client.get_model_metadata("simple", as_json=True)
    assert model["platform"] == "onnxruntime_onnx"
    assert model["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": ["-1", "16"]}


def test_config_matches_http(client: grpcclient.InferenceServerClient, server: RunningServer) -> None:
    import tritonclient.http as httpclient

    grpc_config = client.get_model_config("identity_fp32", as_json=True)["config"]
    http_config = httpclient.InferenceServerClient(server.http_url).get_model_config("identity_fp32")
    assert grpc_config["max_batch_size"] == http_config["max_batch_size"] == 4
    assert http_config["input"][0]["dims"] == [-1]
    assert grpc_config["instance_group"][0]["kind"] == http_config["instance_group"][0]["kind"] == "KIND_CPU"


def test_simple_add_sub(client: grpcclient.InferenceServerClient) -> None:
    a = np.arange(48, dtype=np.int32).reshape(3, 16)
    b = np.ones((3, 16), dtype=np.int32)
    result = client.infer(
        "simple", [_input("INPUT0", a, "INT32"), _input("INPUT1", b, "INT32")], request_id="r1"
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.get_response().id == "r1"


def test_bytes_and_fp16(client: grpcclient.InferenceServerClient) -> None:
    s = np.array([[str(i).encode() for i in range(16)]], dtype=object)
    result = client.infer("simple_string", [_input("INPUT0", s, "BYTES"), _input("INPUT1", s, "BYTES")])
    assert [int(x) for x in result.as_numpy("OUTPUT0").ravel()] == [2 * i for i in range(16)]
    h = np.linspace(0, 1, 8, dtype=np.float16).reshape(2, 4)
    np.testing.assert_array_equal(
        client.infer("identity_fp16", [_input("INPUT0", h, "FP16")]).as_numpy("OUTPUT0"), h
    )


def test_typed_contents(server: RunningServer) -> None:
    """Clients other than tritonclient may send InferTensorContents instead of raw bytes."""
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="simple")
        for name in ("INPUT0", "INPUT1"):
            tensor = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
            tensor.contents.int_contents.extend(range(16))
        response = stub.ModelInfer(request)
    out = np.frombuffer(response.raw_output_contents[0], dtype=np.int32)
    np.testing.assert_array_equal(out, np.arange(16) * 2)


def test_classification(client: grpcclient.InferenceServerClient) -> None:
    data = np.array([[0.1, 0.7, 0.2, 0.0]], dtype=np.float32)
    result = client.infer(
        "classify_fp32",
        [_input("INPUT0", data, "FP32")],
        outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=3)],
    )
    assert result.as_numpy("OUTPUT0").tolist() == [[b"0.700000:1:dog", b"0.200000:2:bird", b"0.100000:0:cat"]]


def test_large_message(client: grpcclient.InferenceServerClient) -> None:
    # 80 MiB each way: beyond gRPC's 4 MiB default and Triton's 64 MiB HTTP default.
    data = np.random.default_rng(1).random((2, 10 * 1024 * 1024), dtype=np.float32)
    result = client.infer("identity_fp32", [_input("INPUT0", data, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_stream_infer(client: grpcclient.InferenceServerClient) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for i in range(10):
            a = np.full((1, 16), i, dtype=np.int32)
            client.async_stream_infer(
                "simple", [_input("INPUT0", a, "INT32"), _input("INPUT1", a, "INT32")], request_id=str(i)
            )
        seen = {}
        for _ in range(10):
            result, error = answers.get(timeout=10)
            assert error is None
            seen[result.get_response().id] = result.as_numpy("OUTPUT0")
    finally:
        client.stop_stream()
    for i in range(10):
        np.testing.assert_array_equal(seen[str(i)], np.full((1, 16), 2 * i))


def test_repository_index(client: grpcclient.InferenceServerClient) -> None:
    index = client.get_model_repository_index(as_json=True)["models"]
    by_name = {(m["name"], m.get("version")): m for m in index}
    assert by_name[("simple", "1")]["state"] == "READY"
    assert ("versions_all", "3") in by_name


def test_stream_with_more_requests_than_its_window(client: grpcclient.InferenceServerClient) -> None:
    """A stream sending far more than the in-flight window (64) is held back, not dropped or buffered without end."""
    answers: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    count = 300
    try:
        a = np.ones((1, 16), dtype=np.int32)
        for i in range(count):
            client.async_stream_infer(
                "simple", [_input("INPUT0", a, "INT32"), _input("INPUT1", a, "INT32")], request_id=str(i)
            )
        ids = set()
        for _ in range(count):
            result, error = answers.get(timeout=30)
            assert error is None
            ids.add(result.get_response().id)
    finally:
        client.stop_stream()
    assert ids == {str(i) for i in range(count)}


def test_statistics(client: grpcclient.InferenceServerClient) -> None:
    a = np.ones((2, 16), dtype=np.int32)
    before = client.get_inference_statistics("simple", as_json=True)["model_stats"][0]
    client.infer("simple", [_input("INPUT0", a, "INT32"), _input("INPUT1", a, "INT32")])
    after = client.get_inference_statistics("simple", as_json=True)["model_stats"][0]
    assert int(after["inference_count"]) - int(before.get("inference_count", 0)) == 2
    assert int(after["execution_count"]) - int(before.get("execution_count", 0)) == 1
    assert int(after["inference_stats"]["success"]["count"]) >= 1
    assert any(int(b["batch_size"]) == 2 for b in after["batch_stats"])
