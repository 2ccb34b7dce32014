"""The in-process Python API (modelhost.Server, modelhost.Model): a server started inside the test's own process,
models loaded and unloaded, numpy in and numpy out, unary and streaming, with and without the HTTP frontend; one
case per backend, each checked against the same server's answer over HTTP through tritonclient."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

import modelhost
from modelhost.errors import InvalidArgument, ModelhostError, NotFound
from modelhost.in_process import ServerError

EXAMPLES = Path(modelhost.__file__).parent / "examples"
PYTHON_MODELS = Path(__file__).parent / "python_models"


@pytest.fixture(scope="module", autouse=True)
def frontend_processes() -> Iterator[int]:
    """The API runs the engine in this process, whatever the mode of the other modules: one run."""
    yield 0


def _tensorflow(repo: Path) -> str:
    pytest.importorskip("tensorflow")
    from backends.tensorflow import models
    from backends.tensorflow.models import write_model

    write_model(repo, "tf_auto", models.matmul)  # auto-completed
    return "tf_auto"


def _example(name: str) -> Callable[[Path], str]:
    def add(repo: Path) -> str:
        shutil.copytree(EXAMPLES / name, repo / name)
        return name

    return add


def _python(repo: Path) -> str:
    shutil.copytree(PYTHON_MODELS / "add_sub", repo / "add_sub")
    return "add_sub"


def _ensemble(repo: Path) -> str:
    for name in ("simple", "simple_ensemble"):
        shutil.copytree(EXAMPLES / name, repo / name)
    return "simple_ensemble"


BACKENDS: dict[str, Callable[[Path], str]] = {
    "onnxruntime": _example("simple"),
    "python": _python,
    "pytorch": _example("tiny_mlp_pytorch"),
    "openvino": _example("tiny_mlp_openvino"),
    "fil": _example("trees_fil"),
    "tensorflow": _tensorflow,
    "ensemble": _ensemble,
    "bytes (onnxruntime)": _example("simple_string"),
}


def _inputs(metadata: dict[str, Any]) -> dict[str, np.ndarray]:
    """Inputs the model's metadata describes: variable dimensions as 2, values 1.. (as strings for BYTES)."""
    rng = np.random.default_rng(7)
    inputs: dict[str, np.ndarray] = {}
    for spec in metadata["inputs"]:
        shape = [2 if d < 0 else d for d in spec["shape"]]
        if spec["datatype"] == "BYTES":
            inputs[spec["name"]] = rng.integers(0, 9, shape).astype(str).astype(object)
        else:
            dtype = {"FP32": np.float32, "INT32": np.int32, "INT64": np.int64, "FP64": np.float64}[
                spec["datatype"]
            ]
            inputs[spec["name"]] = rng.integers(1, 9, shape).astype(dtype)
    return inputs


def _over_http(port: int, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        tensors = []
        for name, array in inputs.items():
            datatype = "BYTES" if array.dtype == object else {np.dtype(np.float32): "FP32"}.get(array.dtype)
            tensor = httpclient.InferInput(name, list(array.shape), datatype or _wire(array))
            tensor.set_data_from_numpy(array, binary_data=True)
            tensors.append(tensor)
        result = client.infer(model, tensors)
        return {o["name"]: result.as_numpy(o["name"]) for o in result.get_response()["outputs"]}
    finally:
        client.close()


def _wire(array: np.ndarray) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return str(np_to_triton_dtype(array.dtype))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_each_backend_answers_through_the_api_as_over_http(backend: str, tmp_path: Path) -> None:
    repo = tmp_path / "models"
    repo.mkdir()
    name = BACKENDS[backend](repo)
    with modelhost.Server(model_repository=repo, http_port=0) as server:
        assert server.ready()
        model = server.model(name)
        assert model.ready()
        inputs = _inputs(model.metadata())
        answer = model.infer(inputs)
        expected = _over_http(server.ports["http"], name, inputs)
        assert sorted(answer) == sorted(expected)
        for output, array in expected.items():
            np.testing.assert_array_equal(answer[output], array)
        streamed = list(model.stream(inputs))  # a model that is not decoupled: one response
        assert len(streamed) == 1
        for output, array in expected.items():
            np.testing.assert_array_equal(streamed[0][output], array)
        assert model.statistics()[0]["inference_stats"]["success"]["count"] >= 3


def test_load_unload_and_config_override_without_any_frontend(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    shutil.copytree(PYTHON_MODELS / "square_decoupled", repo / "square_decoupled")
    server = modelhost.Server(model_repository=repo, model_control_mode="explicit").start()
    try:
        assert server.ports == {}  # no frontend asked for, none started
        assert server.models() == [{"name": "simple"}, {"name": "square_decoupled"}]  # none loaded yet
        model = server.load("simple")
        assert model.ready()
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        np.testing.assert_array_equal(
            model.infer({"INPUT0": a, "INPUT1": a}, outputs=["OUTPUT1"])["OUTPUT1"], a * 0
        )
        server.load("simple", config={"max_batch_size": 4, "dynamic_batching": {}})
        assert model.config()["max_batch_size"] == 4
        server.unload("simple")
        assert not model.ready()
        with pytest.raises(NotFound):  # Triton's wording, as over HTTP
            model.infer({"INPUT0": a, "INPUT1": a})
        # A decoupled model streams its responses as they come.
        decoupled = server.load("square_decoupled")
        answers = [r["OUT"].tolist() for r in decoupled.stream({"IN": np.array([3], dtype=np.int32)})]
        assert answers == [[3], [3], [3]]
    finally:
        assert server.stop() == 0


def test_bad_input_is_a_clear_error_and_the_server_goes_on(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    with modelhost.Server(model_repository=repo) as server:
        model = server.model("simple")
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        with pytest.raises(InvalidArgument, match="INPUT1"):
            model.infer({"INPUT0": a})  # an input missing
        with pytest.raises(InvalidArgument, match="complex64 has no KServe datatype"):
            model.infer({"INPUT0": a.astype(np.complex64), "INPUT1": a})
        with pytest.raises(InvalidArgument):
            model.infer({"INPUT0": a.astype(np.float32), "INPUT1": a})  # the wrong datatype
        np.testing.assert_array_equal(model.infer({"INPUT0": a, "INPUT1": a})["OUTPUT0"], a + a)


def test_a_server_that_cannot_start_says_so(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="unknown server option"):
        modelhost.Server(model_repository=tmp_path, no_such_option=1)
    with pytest.raises(InvalidArgument, match="--http-port must be between 0 and 65535"):
        modelhost.Server(model_repository=tmp_path, http_port=70000)
    with pytest.raises(ServerError, match="did not start"):
        modelhost.Server(model_repository=tmp_path / "missing").start()


def test_a_model_that_fails_to_load_fails_the_start_and_leaves_nothing_running(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    (repo / "simple" / "1" / "model.onnx").write_bytes(b"not a model")
    server = modelhost.Server(model_repository=repo, exit_on_error=False, http_port=0)
    with pytest.raises(ServerError, match="a model failed to load"):
        server.start()
    assert not server.running


def test_a_stop_while_a_stream_is_read_ends_the_stream(tmp_path: Path) -> None:
    import threading

    repo = tmp_path / "models"
    shutil.copytree(PYTHON_MODELS / "square_decoupled", repo / "square_decoupled")
    server = modelhost.Server(model_repository=repo, exit_timeout_secs=1).start()
    ended: list[BaseException | None] = []

    def read() -> None:
        try:
            for _ in server.model("square_decoupled").stream({"IN": np.array([100_000], dtype=np.int32)}):
                pass
            ended.append(None)
        except (ServerError, ModelhostError) as e:
            ended.append(e)

    reader = threading.Thread(target=read)
    reader.start()
    server.stop()
    reader.join(60)
    assert not reader.is_alive(), "the reader was left waiting on a stopped server"


def test_starts_where_new_loops_are_uvloop_and_submits_from_another_loop(tmp_path: Path) -> None:
    """Inside a Ray Serve replica the loop policy is uvloop's, whose loops refuse signal handlers off the main
    thread with ValueError (asyncio's say RuntimeError); and the replica awaits the engine from a loop of its
    own through `submit`."""
    import asyncio

    import uvloop

    shutil.copytree(EXAMPLES / "simple", tmp_path / "simple")
    policy = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())  # for the server's life, as in a replica
    try:
        with modelhost.Server(tmp_path) as server:
            assert server.ready()

            async def ask() -> bool:
                return await asyncio.wrap_future(server.submit(server.engine.model_ready("simple")))

            assert asyncio.run(ask())
    finally:
        asyncio.set_event_loop_policy(policy)
