"""A server whose model repository is in S3 (moto's local server), used through the official tritonclient."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

import modelhost
from e2e.server_process import RunningServer, running_server, start_server
from s3_server import aws_test_env, moto_server, s3_client, upload_directory

EXAMPLES = Path(modelhost.__file__).parent / "examples"
PREFIX = "triton/models"


@pytest.fixture(scope="module")
def endpoint(frontend_processes: int) -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture(scope="module")
def client(endpoint: str, frontend_processes: int) -> Any:
    return s3_client(endpoint)


@pytest.fixture(scope="module")
def bucket(client: Any, frontend_processes: int) -> str:
    name = f"e2e-{uuid.uuid4().hex[:12]}"
    for model in ("simple", "identity_fp32"):
        upload_directory(client, EXAMPLES / model, name, f"{PREFIX}/{model}")
    return name


def s3_url(endpoint: str, bucket: str, prefix: str = PREFIX) -> str:
    """Triton's form for an S3-compatible store over http: s3://host:port/bucket/prefix."""
    return f"s3://{endpoint.removeprefix('http://')}/{bucket}/{prefix}"


@pytest.fixture(scope="module")
def mount(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Path:
    return tmp_path_factory.mktemp("s3_mirror")


@pytest.fixture(scope="module")
def server(
    endpoint: str, bucket: str, mount: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("log") / "server.log"
    env = {**aws_test_env(), "TRITON_AWS_MOUNT_DIRECTORY": str(mount)}
    with running_server(
        [s3_url(endpoint, bucket)],
        log,
        "--model-control-mode=poll",
        "--repository-poll-secs=1",
        env=env,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def http(server: RunningServer, frontend_processes: int) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.http_url)


def infer_simple(http: httpclient.InferenceServerClient) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    inputs = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = http.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_infer_on_a_model_from_s3(http: httpclient.InferenceServerClient) -> None:
    assert http.is_model_ready("simple")
    assert http.is_model_ready("identity_fp32")
    infer_simple(http)


def test_models_are_mirrored_into_the_mount_directory(server: RunningServer, mount: Path) -> None:
    assert (mount / "simple" / "config.pbtxt").read_bytes() == (
        EXAMPLES / "simple" / "config.pbtxt"
    ).read_bytes()
    assert (mount / "simple" / "1" / "model.onnx").is_file()


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_poll_follows_models_added_to_and_removed_from_the_bucket(
    http: httpclient.InferenceServerClient, client: Any, bucket: str
) -> None:
    # identity_fp32 has no config.pbtxt, so its copy takes its name from the directory.
    keys = upload_directory(client, EXAMPLES / "identity_fp32", bucket, f"{PREFIX}/identity_copy")
    wait_for(lambda: http.is_model_ready("identity_copy"), "the model added to the bucket was not loaded")
    index = {entry["name"] for entry in http.get_model_repository_index()}
    assert {"simple", "identity_fp32", "identity_copy"} <= index
    for key in keys:
        client.delete_object(Bucket=bucket, Key=key)
    wait_for(
        lambda: not http.is_model_ready("identity_copy"), "the model removed from the bucket still serves"
    )
    infer_simple(http)


def test_nonexistent_bucket_stops_startup(endpoint: str, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    env = {**aws_test_env(), "TRITON_AWS_MOUNT_DIRECTORY": str(tmp_path / "mirror")}
    with pytest.raises(RuntimeError, match=r"server exited with [1-9]"):
        start_server([s3_url(endpoint, "no-such-bucket")], log, env=env)
    assert "bucket 'no-such-bucket' does not exist" in log.read_text()
