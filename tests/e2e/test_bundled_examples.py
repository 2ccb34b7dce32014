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
