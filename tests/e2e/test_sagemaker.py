"""The SageMaker listener end to end, over plain HTTP as SageMaker's frontend sends it: /ping, /invocations (JSON
and SageMaker's binary content type), the multi-model API in Triton's qa order (load, 409, list, get, invoke with
the target-model header, 404s, delete, delete again), an ensemble among several model directories, and bad input.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from e2e.models import copy_examples
from e2e.server_process import RunningServer, free_ports, running_server

BINARY = "application/vnd.sagemaker-triton.binary+json;json-header-size="
EXAMPLES = Path(__file__).parents[2] / "src" / "modelhost" / "examples"
HERE = Path(__file__).parent

ECHO_PARAMETERS = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = np.array([request.parameters().encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PARAMETERS", text)]))
        return responses
"""
ECHO_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "PARAMETERS", data_type: TYPE_STRING, dims: [ 1 ] } ]
"""
OUT_OF_MEMORY = """
class TritonPythonModel:
    def initialize(self, args):
        raise MemoryError("cannot allocate the weights")

    def execute(self, requests):
        return []
"""


def _python_model(directory: Path, config: str, code: str) -> None:
    (directory / "1").mkdir(parents=True)
    (directory / "config.pbtxt").write_text(config)
    (directory / "1" / "model.py").write_text(code)


def _build_model_root(root: Path) -> None:
    """What SageMaker puts under /opt/ml/models: one directory per model of the endpoint."""
    copy_examples(root / "hash1" / "model", "simple")  # a repository of one model
    shutil.copytree(EXAMPLES / "identity_fp32", root / "hash2" / "model")  # the model at the url itself
    copy_examples(root / "ensemble.hash" / "model", "simple_ensemble", "simple")
    copy_examples(root / "two" / "model", "simple", "identity_fp32")
    (root / "broken" / "model" / "bad").mkdir(parents=True)
    (root / "broken" / "model" / "bad" / "config.pbtxt").write_text("this is not a config {")
    _python_model(root / "oom" / "model" / "greedy", 'backend: "python"\nmax_batch_size: 0\n', OUT_OF_MEMORY)
    (root / "empty" / "model").mkdir(parents=True)


@pytest.fixture(scope="module")
def sagemaker(
    tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[tuple[RunningServer, str, Path]]:
    base = tmp_path_factory.mktemp("sagemaker")
    repo = base / "repo"
    copy_examples(repo, "identity_fp32")
    _python_model(repo / "echo_parameters", ECHO_CONFIG, ECHO_PARAMETERS)
    root = base / "opt-ml-models"
    _build_model_root(root)
    (port,) = free_ports(1)
    env = {
        **os.environ,
        "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "identity_fp32",
        "MODELHOST_SAGEMAKER_MODEL_ROOT": str(root),
    }
    with running_server(
        [repo],
        base / "server.log",
        "--model-control-mode=explicit",
        "--load-model=identity_fp32",
        "--load-model=echo_parameters",
        "--allow-sagemaker=true",
        f"--sagemaker-port={port}",
        env=env,
    ) as server:
        yield server, f"http://127.0.0.1:{port}", root


@pytest.fixture(scope="module")
def url(sagemaker: tuple[RunningServer, str, Path]) -> str:
    return sagemaker[1]


@pytest.fixture(scope="module")
def root(sagemaker: tuple[RunningServer, str, Path]) -> Path:
    return sagemaker[2]


def _identity_body(values: list[float]) -> dict[str, object]:
    return {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, len(values)], "data": values}]}


SIMPLE_BODY = {
    "inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16},
    ]
}


def _error(response: requests.Response) -> str:
    message = response.json()["error"]
    assert isinstance(message, str)
    return message


def _still_serving(url: str) -> None:
    assert requests.get(f"{url}/ping", timeout=10).status_code == 200
    answer = requests.post(f"{url}/invocations", json=_identity_body([1.0]), timeout=10)
    assert answer.status_code == 200, answer.text


# -- /ping and /invocations ---------------------------------------------------------------------------------------


def test_ping(url: str) -> None:
    answer = requests.get(f"{url}/ping", timeout=10)
    assert answer.status_code == 200
    assert answer.content == b""


def test_invocations_json(url: str) -> None:
    answer = requests.post(f"{url}/invocations", json=_identity_body([1.5, 2.5]), timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"] == "application/json"
    doc = answer.json()
    assert doc["model_name"] == "identity_fp32"
    assert doc["outputs"][0]["data"] == [1.5, 2.5]


def test_invocations_binary_in_and_out(url: str) -> None:
    data = np.arange(8, dtype=np.float32).reshape(1, 8)
    tensor = httpclient.InferInput("INPUT0", [1, 8], "FP32")
    tensor.set_data_from_numpy(data, binary_data=True)
    output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
    body, json_size = httpclient.InferenceServerClient.generate_request_body([tensor], outputs=[output])
    answer = requests.post(
        f"{url}/invocations", data=body, headers={"Content-Type": f"{BINARY}{json_size}"}, timeout=10
    )
    assert answer.status_code == 200, answer.text
    content_type = answer.headers["Content-Type"]
    assert content_type.startswith(BINARY)
    assert "Inference-Header-Content-Length" not in answer.headers
    result = httpclient.InferenceServerClient.parse_response_body(
        answer.content, header_length=int(content_type[len(BINARY) :])
    )
    assert np.array_equal(result.as_numpy("OUTPUT0"), data)


@pytest.mark.parametrize(
    ("content_type", "message"),
    [
        (f"additional-string/{BINARY}10", "expect MIME type for binary data starts with"),
        (f"{BINARY}additional-string10", "Unable to parse inference header size, got: additional-string10"),
        (f"{BINARY}-123", "inference header size should be in range (0, "),
        (f"{BINARY}12345", "inference header size should be in range (0, "),
        (f"{BINARY}99999999999", "value is out of range"),
    ],
)
def test_bad_json_header_sizes(url: str, content_type: str, message: str) -> None:
    """Triton's qa cases (sagemaker_test.py): each a 400, and the endpoint keeps serving."""
    answer = requests.post(
        f"{url}/invocations", data=b'{"inputs": []}', headers={"Content-Type": content_type}, timeout=10
    )
    assert answer.status_code == 400
    assert message in _error(answer)
    _still_serving(url)


def test_custom_attributes_reach_the_model_as_a_parameter(
    url: str, sagemaker: tuple[RunningServer, str, Path]
) -> None:
    body = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [1]}]}
    # The multi-model invoke route takes the model from the target-model header (as Triton does).
    loaded = requests.post(
        f"{url}/models",
        json={"model_name": "echo", "url": f"{sagemaker[2]}/hash2/model"},
        timeout=60,
    )
    assert loaded.status_code == 200, loaded.text
    try:
        answer = requests.post(
            f"{url}/models/echo/invoke",
            json=body,
            headers={
                "X-Amzn-SageMaker-Target-Model": "echo_parameters",
                "X-Amzn-SageMaker-Custom-Attributes": "trace=1,tenant=acme",
            },
            timeout=10,
        )
        assert answer.status_code == 200, answer.text
        echoed = answer.json()["outputs"][0]["data"][0]
        assert '"X-Amzn-SageMaker-Custom-Attributes": "trace=1,tenant=acme"' in echoed
    finally:
        assert requests.delete(f"{url}/models/echo", timeout=60).status_code == 200


def test_invocations_with_the_wrong_method_and_unknown_paths(url: str) -> None:
    assert requests.get(f"{url}/invocations", timeout=10).status_code == 405
    assert requests.post(f"{url}/ping", timeout=10).status_code == 405
    answer = requests.get(f"{url}/v2/health/ready", timeout=10)
    assert answer.status_code == 404
    assert _error(answer) == "Not Found"
    assert requests.put(f"{url}/models/x", timeout=10).status_code == 405


def test_invocations_malformed_bodies(url: str) -> None:
    answer = requests.post(f"{url}/invocations", data=b"{not json", timeout=10)
    assert answer.status_code == 400  # Triton: 500
    assert "failed to parse the request JSON buffer" in _error(answer)
    answer = requests.post(f"{url}/invocations", json={"inputs": [{"name": "NOPE"}]}, timeout=10)
    assert answer.status_code == 400
    _still_serving(url)


# -- the multi-model API, in Triton's qa order -----------------------------------------------------------------------


def test_multi_model_sequence(url: str, root: Path, sagemaker: tuple[RunningServer, str, Path]) -> None:
    load_1 = {"model_name": "sm_mme_model_1", "url": f"{root}/hash1/model"}
    load_2 = {"model_name": "sm_mme_model_2", "url": f"{root}/hash2/model/"}
    answer = requests.post(f"{url}/models", json=load_1, timeout=60)
    assert answer.status_code == 200, answer.text
    again = requests.post(f"{url}/models", json=load_1, timeout=60)
    assert again.status_code == 409
    assert "conflicting mapping for 'sm_mme_model_1'" in _error(again)
    answer = requests.post(f"{url}/models", json=load_2, timeout=60)
    assert answer.status_code == 200, answer.text

    listed = requests.get(f"{url}/models", timeout=10)
    assert listed.status_code == 200
    assert sorted(listed.json()["models"], key=lambda m: m["modelName"]) == [
        {"modelName": "sm_mme_model_1", "modelUrl": f"{root}/hash1/model"},
        {"modelName": "sm_mme_model_2", "modelUrl": f"{root}/hash2"},
    ]
    one = requests.get(f"{url}/models/sm_mme_model_1", timeout=10)
    assert one.json() == {"modelName": "sm_mme_model_1", "modelUrl": f"{root}/hash1/model"}

    answer = requests.post(
        f"{url}/models/sm_mme_model_1/invoke",
        json=SIMPLE_BODY,
        headers={"X-Amzn-SageMaker-Target-Model": "sm_mme_model_1"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    doc = answer.json()
    assert (doc["model_name"], doc["model_version"]) == ("sm_mme_model_1", "1")
    assert doc["outputs"][0]["data"] == [i + 1 for i in range(16)]

    data = np.full((1, 4), 7.0, dtype=np.float32)
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(data, binary_data=True)
    body, json_size = httpclient.InferenceServerClient.generate_request_body(
        [tensor], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
    )
    answer = requests.post(
        f"{url}/models/sm_mme_model_2/invoke",
        data=body,
        headers={"Content-Type": f"{BINARY}{json_size}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    size = int(answer.headers["Content-Type"][len(BINARY) :])
    result = httpclient.InferenceServerClient.parse_response_body(answer.content, header_length=size)
    assert np.array_equal(result.as_numpy("OUTPUT0"), data)

    # The repository API of the HTTP endpoint sees the same models.
    server = sagemaker[0]
    index = requests.post(f"http://127.0.0.1:{server.http_port}/v2/repository/index", timeout=10).json()
    assert {"name": "sm_mme_model_1", "version": "1", "state": "READY"} in index

    for name in ("sm_mme_model_1", "sm_mme_model_2"):
        assert requests.delete(f"{url}/models/{name}", timeout=60).status_code == 200
    for missing in ("sm_mme_model_1", "sm_non_loaded_model"):
        assert requests.delete(f"{url}/models/{missing}", timeout=10).status_code == 404
        assert requests.get(f"{url}/models/{missing}", timeout=10).status_code == 404
        answer = requests.post(f"{url}/models/{missing}/invoke", json=SIMPLE_BODY, timeout=10)
        assert answer.status_code == 404
        assert "is not loaded" in _error(answer)
    assert requests.get(f"{url}/models", timeout=10).json() == {"models": []}
    # Unloaded and unregistered: the same url loads again.
    answer = requests.post(f"{url}/models", json=load_1, timeout=60)
    assert answer.status_code == 200, answer.text
    assert requests.delete(f"{url}/models/sm_mme_model_1", timeout=60).status_code == 200


def test_ensemble_among_several_directories(url: str, root: Path) -> None:
    load = {"model_name": "123456789ensemble", "url": f"{root}/ensemble.hash/model"}
    answer = requests.post(
        f"{url}/models", json=load, headers={"X-Amzn-SageMaker-Target-Model": "123456789ensemble"}, timeout=60
    )
    assert answer.status_code == 200, answer.text
    answer = requests.post(f"{url}/models/123456789ensemble/invoke", json=SIMPLE_BODY, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.json()["model_name"] == "123456789ensemble"
    assert requests.delete(f"{url}/models/123456789ensemble", timeout=60).status_code == 200
    # Its composing model went with it: the same directories load again.
    answer = requests.post(f"{url}/models", json=load, timeout=60)
    assert answer.status_code == 200, answer.text
    assert requests.delete(f"{url}/models/123456789ensemble", timeout=60).status_code == 200


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"", 400, "the load request has no body"),
        (b"{not json", 400, "failed to parse the request JSON buffer"),
        (b"[1, 2]", 400, "must be a JSON object"),
        (b'{"model_name": "m"}', 400, "the load request has no 'url'"),
        (b'{"model_name": 7, "url": "/x"}', 400, "Unable to parse 'model_name'"),
        (b'{"url": "/x"}', 400, "names no model"),
        (b'{"model_name": "m", "url": 7}', 400, "Unable to parse 'url'"),
        (b'{"model_name": "m", "url": "relative/model"}', 400, "expected a path of the form"),
        (b'{"model_name": "m", "url": "/proc/self/model"}', 400, "/dev, /proc and /sys hold no models"),
        (b'{"model_name": "m", "url": "/dev/shm/model"}', 400, "/dev, /proc and /sys hold no models"),
        (b'{"model_name": "m", "url": "/etc/model"}', 400, "expected a path of the form"),
    ],
)
def test_bad_load_requests(url: str, body: bytes, status: int, message: str) -> None:
    answer = requests.post(f"{url}/models", data=body, timeout=10)
    assert answer.status_code == status
    assert message in _error(answer)
    _still_serving(url)


@pytest.mark.parametrize(
    ("directory", "status", "message"),
    [
        ("../hash1/model", 400, "'.' and '..' are not allowed"),
        ("missing/model", 400, "no such directory"),
        ("empty/model", 400, "holds no model directory"),
        ("two/model", 400, "holds several model directories (identity_fp32, simple) and none is an ensemble"),
        ("broken/model", 400, "failed to load 'broken'"),
        ("oom/model", 507, "MemoryError"),
    ],
)
def test_load_failures(url: str, root: Path, directory: str, status: int, message: str) -> None:
    name = directory.split("/")[0].strip(".") or "dots"
    answer = requests.post(
        f"{url}/models", json={"model_name": name, "url": f"{root}/{directory}"}, timeout=60
    )
    assert answer.status_code == status, answer.text
    assert message in _error(answer)
    # Nothing is left registered: the list is unchanged and the endpoint keeps serving.
    assert name not in {m["modelName"] for m in requests.get(f"{url}/models", timeout=10).json()["models"]}
    _still_serving(url)


def test_a_target_the_repository_serves_is_loaded_from_the_url(
    url: str, root: Path, sagemaker: tuple[RunningServer, str, Path]
) -> None:
    """A target model name the repository serves: the load's mapping takes precedence and the model is loaded
    from the url (200, as Triton; its L0_trace loads `simple` so). A second load of that name is the conflict."""
    control = httpclient.InferenceServerClient(sagemaker[0].http_url)
    answer = requests.post(
        f"{url}/models",
        json={"model_name": "second", "url": f"{root}/hash2/model"},
        headers={"X-Amzn-SageMaker-Target-Model": "identity_fp32"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    try:
        config = control.get_model_config("identity_fp32")
        assert config["name"] == "identity_fp32"
        index = {r["name"]: r for r in control.get_model_repository_index()}
        assert index["identity_fp32"]["state"] == "READY"
        _still_serving(url)
        again = requests.post(
            f"{url}/models",
            json={"model_name": "third", "url": f"{root}/hash2/model"},
            headers={"X-Amzn-SageMaker-Target-Model": "identity_fp32"},
            timeout=60,
        )
        assert again.status_code == 409
        assert "there is a conflicting mapping for 'identity_fp32'" in _error(again)
    finally:
        assert requests.delete(f"{url}/models/second", timeout=60).status_code == 200
        control.load_model("identity_fp32")  # the repository's model again
    _still_serving(url)


def test_the_log_names_the_target_model(sagemaker: tuple[RunningServer, str, Path]) -> None:
    assert "Loading SageMaker TargetModel: sm_mme_model_1" in sagemaker[0].log()
