"""Inference over HTTP through the official tritonclient: JSON, binary, BYTES, dtypes, shapes, classification."""

from __future__ import annotations

import json

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from e2e.server_process import RunningServer


@pytest.fixture(scope="module")
def client(server: RunningServer, frontend_processes: int) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.http_url)


def _input(name: str, array: np.ndarray, datatype: str, binary: bool) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


@pytest.mark.parametrize("binary", [False, True])
def test_simple_add_sub(client: httpclient.InferenceServerClient, binary: bool) -> None:
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 3, dtype=np.int32)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
    result = client.infer(
        "simple",
        [_input("INPUT0", a, "INT32", binary), _input("INPUT1", b, "INT32", binary)],
        outputs=outputs,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert response["model_name"] == "simple"
    assert response["model_version"] == "1"


@pytest.mark.parametrize("binary", [False, True])
def test_bytes_model(client: httpclient.InferenceServerClient, binary: bool) -> None:
    a = np.array([[str(i).encode() for i in range(16)]], dtype=object)
    b = np.array([[b"10"] * 16], dtype=object)
    result = client.infer(
        "simple_string", [_input("INPUT0", a, "BYTES", binary), _input("INPUT1", b, "BYTES", binary)]
    )
    assert [int(x) for x in result.as_numpy("OUTPUT0").ravel()] == [i + 10 for i in range(16)]
    assert [int(x) for x in result.as_numpy("OUTPUT1").ravel()] == [i - 10 for i in range(16)]


_DTYPES = {
    "bool": (np.bool_, "BOOL"),
    "uint8": (np.uint8, "UINT8"),
    "int8": (np.int8, "INT8"),
    "int16": (np.int16, "INT16"),
    "uint16": (np.uint16, "UINT16"),
    "uint32": (np.uint32, "UINT32"),
    "int64": (np.int64, "INT64"),
    "uint64": (np.uint64, "UINT64"),
    "fp16": (np.float16, "FP16"),
    "fp64": (np.float64, "FP64"),
}


@pytest.mark.parametrize("suffix", list(_DTYPES))
@pytest.mark.parametrize("binary", [False, True])
def test_identity_every_datatype(client: httpclient.InferenceServerClient, suffix: str, binary: bool) -> None:
    dtype, datatype = _DTYPES[suffix]
    if datatype == "FP16" and not binary:
        pytest.skip("FP16 cannot travel as JSON (tested in the bad-input tests)")
    data = (
        (np.arange(12).reshape(3, 4) % 2 == 0)
        if dtype is np.bool_
        else np.arange(12, dtype=dtype).reshape(3, 4)
    )
    result = client.infer(
        f"identity_{suffix}",
        [_input("INPUT0", data, datatype, binary)],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)],
    )
    out = result.as_numpy("OUTPUT0")
    assert out.dtype == data.dtype
    np.testing.assert_array_equal(out, data)


def test_bytes_identity_keeps_arbitrary_text(client: httpclient.InferenceServerClient) -> None:
    data = np.array([["héllo".encode(), b"", b"a\x00b"]], dtype=object)
    result = client.infer("identity_bytes", [_input("INPUT0", data, "BYTES", True)])
    assert result.as_numpy("OUTPUT0").tolist() == data.tolist()


def test_binary_data_output_request_parameter(server: RunningServer) -> None:
    # tritonclient sets this parameter itself, so the request is written by hand.
    body = {
        "inputs": [{"name": "INPUT0", "shape": [1, 5], "datatype": "FP32", "data": [1, 2, 3, 4, 5]}],
        "parameters": {"binary_data_output": True},
    }
    r = requests.post(f"http://{server.http_url}/v2/models/identity_fp32/infer", json=body, timeout=10)
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "application/octet-stream"
    header_length = int(r.headers["Inference-Header-Content-Length"])
    header = json.loads(r.content[:header_length])
    assert header["outputs"][0]["parameters"] == {"binary_data_size": 20}
    np.testing.assert_array_equal(np.frombuffer(r.content[header_length:], dtype=np.float32), [1, 2, 3, 4, 5])


def test_classification_with_labels(client: httpclient.InferenceServerClient) -> None:
    data = np.array([[0.1, 0.7, 0.2, 0.0], [0.9, 0.0, 0.05, 0.05]], dtype=np.float32)
    result = client.infer(
        "classify_fp32",
        [_input("INPUT0", data, "FP32", True)],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", class_count=2)],
    )
    out = result.as_numpy("OUTPUT0")
    assert out.shape == (2, 2)
    assert out[0].tolist() == [b"0.700000:1:dog", b"0.200000:2:bird"]
    assert out[1][0] == b"0.900000:0:cat"


def test_reshape(client: httpclient.InferenceServerClient) -> None:
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    result = client.infer("reshape_fp32", [_input("INPUT0", data, "FP32", True)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_no_batching_model(client: httpclient.InferenceServerClient) -> None:
    data = np.arange(6, dtype=np.int32).reshape(2, 3)
    result = client.infer("nobatch_int32", [_input("INPUT0", data, "INT32", False)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    meta = client.get_model_metadata("nobatch_int32")
    assert meta["inputs"][0]["shape"] == [2, 3]


def test_variable_dims_and_mlp(client: httpclient.InferenceServerClient) -> None:
    for width in (1, 7, 300):
        data = np.random.default_rng(width).random((2, width), dtype=np.float32)
        result = client.infer("identity_fp32", [_input("INPUT0", data, "FP32", True)])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    x = np.random.default_rng(0).random((4, 256), dtype=np.float32)
    result = client.infer("mlp", [_input("INPUT0", x, "FP32", True)])
    assert result.as_numpy("OUTPUT0").shape == (4, 10)


def test_request_id_is_echoed(client: httpclient.InferenceServerClient) -> None:
    data = np.ones((1, 2), dtype=np.float32)
    result = client.infer("identity_fp32", [_input("INPUT0", data, "FP32", True)], request_id="my-id-1")
    assert result.get_response()["id"] == "my-id-1"


def test_selected_output_only(client: httpclient.InferenceServerClient) -> None:
    a = np.ones((1, 16), dtype=np.int32)
    result = client.infer(
        "simple",
        [_input("INPUT0", a, "INT32", True), _input("INPUT1", a, "INT32", True)],
        outputs=[httpclient.InferRequestedOutput("OUTPUT1")],
    )
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - a)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_request_and_response_compression(client: httpclient.InferenceServerClient, algorithm: str) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    result = client.infer(
        "simple",
        [_input("INPUT0", a, "INT32", True), _input("INPUT1", a, "INT32", False)],
        request_compression_algorithm=algorithm,
        response_compression_algorithm=algorithm,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)


def test_versions_by_policy(client: httpclient.InferenceServerClient) -> None:
    x = np.zeros((1, 4), dtype=np.int32)

    def answer(model: str, version: str = "") -> int:
        result = client.infer(model, [_input("INPUT0", x, "INT32", True)], model_version=version)
        return int(result.as_numpy("OUTPUT0")[0, 0])

    assert answer("versions_latest") == 3
    assert answer("versions_latest", "2") == 2
    assert client.get_model_metadata("versions_latest")["versions"] == ["2", "3"]
    assert [answer("versions_all", v) for v in ("1", "2", "3")] == [1, 2, 3]
    assert client.get_model_metadata("versions_specific")["versions"] == ["1", "3"]
    assert answer("versions_specific") == 3
    with pytest.raises(InferenceServerException, match="version 1 is not found"):
        answer("versions_latest", "1")
    assert client.is_model_ready("versions_specific", "1")
    assert not client.is_model_ready("versions_specific", "2")


def test_concurrent_requests_each_get_their_own_answer(
    client: httpclient.InferenceServerClient, server: RunningServer
) -> None:
    pool = httpclient.InferenceServerClient(server.http_url, concurrency=8)
    pending = []
    for i in range(64):
        a = np.full((1, 16), i, dtype=np.int32)
        pending.append(
            (
                i,
                pool.async_infer(
                    "simple", [_input("INPUT0", a, "INT32", True), _input("INPUT1", a, "INT32", True)]
                ),
            )
        )
    for i, request in pending:
        np.testing.assert_array_equal(request.get_result().as_numpy("OUTPUT0"), np.full((1, 16), 2 * i))
    pool.close()


def test_raw_binary_request(server: RunningServer) -> None:
    """`Inference-Header-Content-Length: 0`: the body is the one input's bytes; every output comes back binary."""
    data = np.arange(6, dtype=np.float32)
    r = requests.post(
        f"http://{server.http_url}/v2/models/identity_fp32/infer",
        data=data.tobytes(),
        headers={"Inference-Header-Content-Length": "0"},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    header_length = int(r.headers["Inference-Header-Content-Length"])
    header = json.loads(r.content[:header_length])
    assert header["outputs"][0]["shape"] == [1, 6]
    np.testing.assert_array_equal(np.frombuffer(r.content[header_length:], dtype=np.float32), data)


@pytest.mark.parametrize(("accept", "expected"), [("gzip", "gzip"), ("deflate;q=0.9, gzip;q=0.5", "deflate")])
def test_response_is_compressed_as_accepted(server: RunningServer, accept: str, expected: str) -> None:
    """tritonclient decompresses transparently, so the test above cannot tell; look at the raw answer."""
    import zlib

    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}
    ).encode()
    deflated = zlib.compress(body)
    raw = requests.post(
        f"http://{server.http_url}/v2/models/identity_fp32/infer",
        data=deflated,
        headers={"Content-Encoding": "deflate", "Accept-Encoding": accept},
        timeout=10,
        stream=True,
    ).raw
    assert raw.headers["Content-Encoding"] == expected
    payload = raw.read(decode_content=False)
    wbits = 16 + zlib.MAX_WBITS if expected == "gzip" else zlib.MAX_WBITS
    answer = json.loads(zlib.decompress(payload, wbits))
    assert answer["outputs"][0]["data"] == [1.0, 2.0, 3.0]
