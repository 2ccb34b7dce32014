"""Python-based backends through tritonclient: `backend: "<name>"` served by `<--backend-directory>/<name>/model.py`,
as in Triton. The backend echoes its input with a greeting taken from each model's own parameters, and completes
the inputs and outputs of a model whose config names none."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from e2e.server_process import RunningServer, running_server

BACKEND = textwrap.dedent(
    """
    import json

    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        @staticmethod
        def auto_complete_config(config):
            if not config.as_dict()["input"]:
                config.add_input({"name": "TEXT", "data_type": "TYPE_STRING", "dims": [-1]})
                config.add_output({"name": "REPLY", "data_type": "TYPE_STRING", "dims": [-1]})
            return config

        def initialize(self, args):
            parameters = json.loads(args["model_config"]).get("parameters", {})
            self.greeting = parameters.get("greeting", {}).get("string_value", "hello").encode()

        def execute(self, requests):
            responses = []
            for request in requests:
                text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
                reply = np.array([self.greeting + b" " + t for t in text], dtype=np.object_)
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("REPLY", reply)]))
            return responses
    """
)

IO = """
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "REPLY" data_type: TYPE_STRING dims: [ -1 ] } ]
"""


def add_model(repo: Path, name: str, config: str) -> None:
    (repo / name / "1").mkdir(parents=True)  # empty: the model file is the backend's
    (repo / name / "config.pbtxt").write_text(config)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("python_based")
    backends, repo = root / "backends", root / "models"
    (backends / "echo").mkdir(parents=True)
    (backends / "echo" / "model.py").write_text(BACKEND)
    add_model(
        repo,
        "greeter",
        f'backend: "echo"\nmax_batch_size: 0\n{IO}parameters {{ key: "greeting" value: {{ string_value: "hi" }} }}\n',
    )
    add_model(repo, "plain", f'backend: "echo"\nmax_batch_size: 0\n{IO}')
    add_model(repo, "completed", 'backend: "echo"\nmax_batch_size: 0\n')
    add_model(repo, "elsewhere", f'backend: "not_in_the_directory"\nmax_batch_size: 0\n{IO}')
    log = tmp_path_factory.mktemp("logs") / "python_based.log"
    with running_server(
        [repo],
        log,
        f"--backend-directory={backends}",
        "--model-control-mode=explicit",
        "--load-model=greeter",
        "--load-model=plain",
        "--load-model=completed",
    ) as running:
        yield running


@pytest.fixture
def client(server: RunningServer) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(server.http_url)
    yield client
    client.close()


def ask(client: httpclient.InferenceServerClient, model: str) -> list[bytes]:
    text = np.array([b"there"], dtype=np.object_)
    inp = httpclient.InferInput("TEXT", [1], "BYTES")
    inp.set_data_from_numpy(text)
    return list(client.infer(model, [inp]).as_numpy("REPLY"))


def test_a_model_of_a_python_based_backend_is_served(client: httpclient.InferenceServerClient) -> None:
    # Each model is the backend's model.py with its own configuration.
    assert ask(client, "greeter") == [b"hi there"]
    assert ask(client, "plain") == [b"hello there"]
    assert client.get_model_config("greeter")["backend"] == "echo"


def test_the_backends_auto_complete_fills_a_config_without_io(
    client: httpclient.InferenceServerClient,
) -> None:
    config = client.get_model_config("completed")
    assert [i["name"] for i in config["input"]] == ["TEXT"]
    assert [o["name"] for o in config["output"]] == ["REPLY"]
    assert ask(client, "completed") == [b"hello there"]


def test_a_backend_in_no_directory_fails_the_load(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException, match="backend 'not_in_the_directory'"):
        client.load_model("elsewhere")
    assert ask(client, "greeter") == [b"hi there"]
