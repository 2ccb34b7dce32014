"""Model warmup: samples run on every instance before READY; a failing sample fails the load with its reason."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from e2e.models import add_identity, copy_examples
from e2e.server_process import RunningServer, running_server

SAMPLE = '{{ name: "{name}" batch_size: {rows} {count} inputs {{ key: "INPUT0" value: {{ {value} }} }} }}'
SAMPLES = (
    "model_warmup [ "
    + ", ".join(
        SAMPLE.format(name=name, rows=rows, count=count, value=f"data_type: TYPE_FP32 dims: [ 4 ] {data}")
        for name, rows, count, data in (
            ("zeros", 2, "count: 3", "zero_data: true"),
            ("random", 1, "", "random_data: true"),
            ("from_file", 1, "", 'input_data_file: "four_floats"'),
        )
    )
    + " ]\ninstance_group [ { count: 2 kind: KIND_CPU } ]"
)


@pytest.fixture(scope="module")
def warm_server(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("repo")
    copy_examples(repo, "simple")
    add_identity(repo, "warm", "FP32", dims="[ 4 ]", extra=SAMPLES)
    (repo / "warm" / "warmup").mkdir()
    (repo / "warm" / "warmup" / "four_floats").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    add_identity(
        repo,
        "warm_strings",
        "BYTES",
        dims="[ 2 ]",
        extra=(
            'model_warmup [ { name: "strings" batch_size: 1 inputs { key: "INPUT0" value: { data_type: TYPE_STRING '
            'dims: [ 2 ] input_data_file: "two_strings" } } } ]'
        ),
    )
    (repo / "warm_strings" / "warmup").mkdir()
    (repo / "warm_strings" / "warmup" / "two_strings").write_bytes(
        b"".join(struct.pack("<I", len(s)) + s for s in (b"ab", b"cde"))
    )
    add_identity(
        repo,
        "missing_file",
        "FP32",
        dims="[ 4 ]",
        extra=(
            'model_warmup [ { name: "nofile" batch_size: 1 inputs { key: "INPUT0" value: { data_type: TYPE_FP32 '
            'dims: [ 4 ] input_data_file: "../../simple/config.pbtxt" } } } ]'
        ),
    )
    add_identity(
        repo,
        "wrong_dims",
        "FP32",
        dims="[ 4 ]",
        extra=(
            'model_warmup [ { name: "bad" batch_size: 1 inputs { key: "INPUT0" value: { data_type: TYPE_FP32 '
            "dims: [ 3, 3 ] zero_data: true } } } ]"
        ),
    )
    add_identity(
        repo,
        "too_big",
        "FP32",
        dims="[ 4 ]",
        extra=(
            'model_warmup [ { name: "big" batch_size: 9 inputs { key: "INPUT0" value: { data_type: TYPE_FP32 '
            "dims: [ 4 ] zero_data: true } } } ]"
        ),
    )
    # A warmup input the config does not name reaches the model (Triton's L0_backend_python bls_model_loading).
    (repo / "warm_python" / "1").mkdir(parents=True)
    (repo / "warm_python" / "config.pbtxt").write_text(
        'backend: "python"\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'model_warmup [ { name: "extra" batch_size: 1 inputs { key: "INPUT0" value: { data_type: TYPE_FP32 '
        'dims: [ 4 ] zero_data: true } } inputs { key: "EXTRA" value: { data_type: TYPE_INT32 dims: [ 2 ] '
        "zero_data: true } } } ]\n"
    )
    (repo / "warm_python" / "1" / "model.py").write_text(WARM_PYTHON)
    log_dir = tmp_path_factory.mktemp("log")
    with running_server([repo], log_dir / "server.log", "--exit-on-error=false", wait_ready=False) as server:
        yield server


WARM_PYTHON = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            names = sorted(t.name() for t in request.inputs())
            pb_utils.Logger.log_info(f"warm_python saw inputs {names}")
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
"""


def _index(server: RunningServer) -> dict[str, dict[str, str]]:
    rows = requests.post(f"http://{server.http_url}/v2/repository/index", timeout=5).json()
    return {row["name"]: row for row in rows}


def test_warm_models_are_ready_after_every_sample_ran(warm_server: RunningServer) -> None:
    index = _index(warm_server)
    assert index["warm"]["state"] == "READY"
    assert index["warm_strings"]["state"] == "READY"
    log = warm_server.log()
    for sample in ("zeros", "random", "from_file"):
        assert f"model 'warm': warmup sample '{sample}' ran on 2 instance(s)" in log
    assert index["warm_python"]["state"] == "READY"
    assert "warm_python saw inputs ['EXTRA', 'INPUT0']" in log
    # Warmup requests are not inference requests: the statistics start at zero.
    stats = httpclient.InferenceServerClient(warm_server.http_url).get_inference_statistics("warm")
    assert stats["model_stats"][0]["inference_count"] == 0


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        (
            "missing_file",
            "warmup sample 'nofile': input 'INPUT0': file '../../simple/config.pbtxt' not found",
        ),
        ("wrong_dims", "warmup sample 'bad': failed on instance"),
        ("too_big", "warmup sample 'big': batch_size 9 must be in [1, 8]"),
    ],
)
def test_failing_warmup_fails_the_load(warm_server: RunningServer, model: str, reason: str) -> None:
    row = _index(warm_server)[model]
    assert row["state"] == "UNAVAILABLE"
    assert reason in row["reason"]
