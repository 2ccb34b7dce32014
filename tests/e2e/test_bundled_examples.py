"""The bundled example repository as `scripts/serve.sh` serves it: every model loads, and the ensemble answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

import modelhost
from e2e.server_process import RunningServer, running_server

EXAMPLES = Path(modelhost.__file__).parent / "examples"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Iterator[RunningServer]:
    with running_server([EXAMPLES], tmp_path_factory.mktemp("log") / "server.log") as running:
        yield running


def test_every_bundled_model_is_ready(http: httpclient.InferenceServerClient) -> None:
    names = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir())
    assert "simple_ensemble" in names
    assert all(http.is_model_ready(name) for name in names)


def test_the_bundled_ensemble_chains_two_simple_steps(http: httpclient.InferenceServerClient) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = http.infer("simple_ensemble", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 2 * b)
    assert http.get_model_metadata("simple_ensemble")["platform"] == "ensemble"


def _infer_one(
    http: httpclient.InferenceServerClient, model: str, name: str, x: np.ndarray, out: str
) -> np.ndarray:
    tensor = httpclient.InferInput(name, list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    answer = http.infer(model, [tensor]).as_numpy(out)
    assert answer is not None
    return answer


def test_the_pytorch_and_openvino_examples_give_the_same_answer(
    http: httpclient.InferenceServerClient,
) -> None:
    # One MLP's weights in two formats, served by two backends: the same rows give the same outputs.
    x = np.random.default_rng(3).standard_normal((5, 16)).astype(np.float32)
    torch_answer = _infer_one(http, "tiny_mlp_pytorch", "INPUT__0", x, "OUTPUT__0")
    openvino_answer = _infer_one(http, "tiny_mlp_openvino", "INPUT0", x, "OUTPUT0")
    assert torch_answer.shape == (5, 4)
    np.testing.assert_allclose(torch_answer, openvino_answer, rtol=1e-4, atol=1e-5)
    assert http.get_model_metadata("tiny_mlp_pytorch")["platform"] == "pytorch_libtorch"


def test_the_fil_example_gives_class_probabilities(http: httpclient.InferenceServerClient) -> None:
    x = np.random.default_rng(4).standard_normal((6, 8)).astype(np.float32)
    proba = _infer_one(http, "trees_fil", "input__0", x, "output__0")
    assert proba.shape == (6, 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-5)
    assert ((proba >= 0) & (proba <= 1)).all()
