"""The python backend end to end: tests/e2e/python_models (Triton model directories, unchanged) served by
modelhost and driven through tritonclient over HTTP and gRPC. The expected answers are the reference
tritonserver's (2.51), recorded in tests/e2e/python_models/REFERENCE.md; where a test expects something else it
says so."""

from __future__ import annotations

import os
import queue
import re
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from e2e.clients import Api, failure, fp32, poll
from e2e.models import add_versioned_add
from e2e.server_process import LOAD_ALL_EXPLICITLY, RunningServer, running_server

PYTHON_MODELS = Path(__file__).parent / "python_models"
FAILING_TO_LOAD = ("import_error", "init_error", "bls_init_error")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Path:
    root = tmp_path_factory.mktemp("python_backend") / "models"
    shutil.copytree(PYTHON_MODELS, root, ignore=shutil.ignore_patterns("*.md", "__pycache__"))
    # bls_onnx calls this ONNX model of the same server: OUTPUT0 = INPUT0 + 1, INT32 [batch, 4]
    add_versioned_add(root, "onnx_add", (1,), "{ latest { num_versions: 1 } }")
    (root / "loose_outputs" / "1").mkdir(parents=True)
    (root / "loose_outputs" / "config.pbtxt").write_text(LOOSE_OUTPUTS_CONFIG)
    (root / "loose_outputs" / "1" / "model.py").write_text(LOOSE_OUTPUTS_MODEL)
    decoupled = root / "response_params_decoupled"
    shutil.copytree(root / "response_params", decoupled)
    config = (
        (decoupled / "config.pbtxt").read_text().replace('"response_params"', '"response_params_decoupled"')
    )
    (decoupled / "config.pbtxt").write_text(config + "model_transaction_policy { decoupled: true }\n")
    return root


# Triton's L0_backend_python init_args model answers OUT of shape [1] to a batch of 2 rows (the config says
# [-1, -1]); this one does that, leaves EXTRA out, and returns a tensor the config does not name.
LOOSE_OUTPUTS_CONFIG = """
backend: "python"
max_batch_size: 64
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "EXTRA" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
LOOSE_OUTPUTS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = pb_utils.Tensor("OUT", np.array([7], dtype=np.float32))
        undeclared = pb_utils.Tensor("UNDECLARED", np.array([1], dtype=np.float32))
        return [pb_utils.InferenceResponse([out, undeclared]) for _ in requests]
"""


@pytest.fixture(scope="module")
def server(
    repo: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    # Explicit mode also lets the faulty-model tests send load requests and see the load response;
    # import_error and init_error fail to load on purpose. The reference answered the same in both modes.
    log = tmp_path_factory.mktemp("logs") / "python_backend.log"
    shm = f"--backend-config=python,shm-region-prefix-name={SHM_PREFIX}"
    with running_server([repo], log, *LOAD_ALL_EXPLICITLY, shm) as running:
        yield running
    leftovers = [n for n in os.listdir("/dev/shm") if n.startswith(SHM_PREFIX)]
    assert leftovers == [], "shared memory left behind after the server stopped"


SHM_PREFIX = f"mh_e2e_{os.getpid()}_"


def test_tensors_travel_in_shared_memory_with_the_configured_prefix(api: Api) -> None:
    # Tensors of up to ipc.INLINE_BYTES travel in the message: this one takes shared memory, both ways.
    data = np.arange(4096, dtype=np.float32)
    result = api.infer("identity_delay", INPUT0=data)
    assert result.as_numpy("OUTPUT0").tolist() == data.tolist()
    assert any(n.startswith(SHM_PREFIX) for n in os.listdir("/dev/shm"))


# --- plain models


def test_add_sub(api: Api) -> None:
    result = api.infer(
        "add_sub", INPUT0=fp32(1, 2, 3, 4).reshape(1, 4), INPUT1=fp32(10, 20, 30, 40).reshape(1, 4)
    )
    assert result.as_numpy("OUTPUT0").tolist() == [[11, 22, 33, 44]]
    assert result.as_numpy("OUTPUT1").tolist() == [[-9, -18, -27, -36]]
    assert result.as_numpy("OUTPUT0").dtype == np.float32


def test_add_sub_metadata_and_config(http: httpclient.InferenceServerClient) -> None:
    metadata = http.get_model_metadata("add_sub")
    assert metadata["platform"] == "python"
    assert [(i["name"], i["datatype"], i["shape"]) for i in metadata["inputs"]] == [
        ("INPUT0", "FP32", [-1, 4]),
        ("INPUT1", "FP32", [-1, 4]),
    ]
    config = http.get_model_config("add_sub")
    assert (config["backend"], config["platform"], config["max_batch_size"]) == ("python", "", 8)


def test_add_sub_missing_input_is_refused_before_the_model(api: Api) -> None:
    error = failure(lambda: api.infer("add_sub", INPUT0=fp32(1, 2, 3, 4).reshape(1, 4)))
    assert error.status() == api.status(400, grpc.StatusCode.INVALID_ARGUMENT)
    assert error.message() == (
        "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'add_sub'. Got input(s) "
        "['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s)."
    )


def test_string_ops_bytes_both_ways(api: Api) -> None:
    words = np.array([b"hello", "Wörld".encode(), b""], dtype=np.object_)
    result = api.infer("string_ops", INPUT0=words)
    assert result.as_numpy("OUTPUT0").tolist() == [b"HELLO", "WÖRLD".encode(), b""]
    assert result.as_numpy("LENGTH").tolist() == [5, 6, 0]


def test_optional_input_absent_and_present(api: Api) -> None:
    assert api.infer("optional_input", INPUT0=fp32(1, 2)).as_numpy("OUTPUT0").tolist() == [1, 2]
    both = api.infer("optional_input", INPUT0=fp32(1, 2), INPUT1=fp32(10, 20))
    assert both.as_numpy("OUTPUT0").tolist() == [11, 22]


def test_optional_input_without_the_required_one_fails(api: Api) -> None:
    # Triton passes the request to the model, whose get_input_tensor_by_name("INPUT0") is None: 500
    # "Failed to process the request(s) for model 'optional_input_0', message: AttributeError: ...". Refusing it
    # up front (400 naming the input) is as good: the status class and the model name are what must hold.
    error = failure(lambda: api.infer("optional_input", INPUT1=fp32(10, 20)))
    assert error.status() in {
        api.status(500, grpc.StatusCode.INTERNAL),
        api.status(400, grpc.StatusCode.INVALID_ARGUMENT),
    }
    assert "optional_input" in error.message()


def test_identity_delay_reads_the_request_parameter_and_the_optional_input(api: Api) -> None:
    by_parameter = api.client.infer(
        "identity_delay", api.inputs(INPUT0=fp32(1.5, 2.5)), parameters={"delay_ms": 200}
    )
    assert by_parameter.as_numpy("OUTPUT0").tolist() == [1.5, 2.5]
    start, end = by_parameter.as_numpy("TIMES").tolist()
    assert end - start >= 0.2
    by_input = api.infer("identity_delay", INPUT0=fp32(3), DELAY_MS=np.array([100], dtype=np.int32))
    start, end = by_input.as_numpy("TIMES").tolist()
    assert by_input.as_numpy("OUTPUT0").tolist() == [3] and end - start >= 0.1


def test_two_instances_run_in_parallel(server: RunningServer) -> None:
    def delayed(_: int) -> tuple[float, list[float]]:
        client = httpclient.InferenceServerClient(server.http_url)  # one connection per thread
        try:
            began = time.monotonic()
            result = Api("http", httpclient, client).infer(
                "identity_delay", INPUT0=fp32(1), DELAY_MS=np.array([500], dtype=np.int32)
            )
            return time.monotonic() - began, result.as_numpy("TIMES").tolist()
        finally:
            client.close()

    single, _ = delayed(0)
    began = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        (_, (a_start, a_end)), (_, (b_start, b_end)) = list(pool.map(delayed, range(2)))
    both = time.monotonic() - began
    assert max(a_start, b_start) < min(a_end, b_end), "the two executions did not overlap"
    assert both < 1.5 * single


def test_the_models_own_is_ready_decides_model_readiness(
    http: httpclient.InferenceServerClient, grpc_client: grpcclient.InferenceServerClient
) -> None:
    assert not http.is_model_ready("not_ready_yet")
    assert not grpc_client.is_model_ready("not_ready_yet")
    Api("http", httpclient, http).infer("not_ready_yet", INPUT0=fp32(1))
    assert http.is_model_ready("not_ready_yet")
    assert grpc_client.is_model_ready("not_ready_yet")


def test_dynamically_batched_requests_each_get_their_own_answer(server: RunningServer) -> None:
    # auto_complete's config has dynamic batching: concurrent requests reach execute together, as a list.
    def one(i: int) -> list[list[float]]:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            rows = np.array([[i, i + 0.5]] * (1 + i % 3), dtype=np.float32)
            result = Api("http", httpclient, client).infer("auto_complete", INPUT0=rows)
            return result.as_numpy("OUTPUT0").tolist()
        finally:
            client.close()

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(one, range(24)))
    for i, answer in enumerate(answers):
        assert answer == [[2 * i, 2 * i + 1]] * (1 + i % 3)


def test_auto_complete_config_is_served(
    http: httpclient.InferenceServerClient, grpc_client: grpcclient.InferenceServerClient
) -> None:
    config = http.get_model_config("auto_complete")
    assert config["max_batch_size"] == 4
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [("INPUT0", "TYPE_FP32", [2])]
    assert [(o["name"], o["data_type"], o["dims"]) for o in config["output"]] == [
        ("OUTPUT0", "TYPE_FP32", [2])
    ]
    assert config["dynamic_batching"]["preferred_batch_size"] == [4]
    assert grpc_client.get_model_config("auto_complete").config.max_batch_size == 4
    result = Api("http", httpclient, http).infer("auto_complete", INPUT0=fp32(1, 2).reshape(1, 2))
    assert result.as_numpy("OUTPUT0").tolist() == [[2, 4]]


# --- business logic scripting


def test_bls_python_calls_add_sub(api: Api) -> None:
    result = api.infer(
        "bls_python", INPUT0=fp32(1, 2, 3, 4).reshape(1, 4), INPUT1=fp32(10, 20, 30, 40).reshape(1, 4)
    )
    assert result.as_numpy("OUTPUT0").tolist() == [[11, 22, 33, 44]]
    assert result.as_numpy("OUTPUT1").tolist() == [[-9, -18, -27, -36]]


def test_bls_from_the_models_threads_while_execute_joins_them(api: Api) -> None:
    # Triton's BLS qa model sends sequences from two threads and joins them: the replies must reach those
    # threads while the main thread waits in join().
    for _ in range(3):
        result = api.infer(
            "bls_threads", INPUT0=fp32(1, 2, 3, 4).reshape(1, 4), INPUT1=fp32(10, 20, 30, 40).reshape(1, 4)
        )
        assert result.as_numpy("OUTPUT0").tolist() == [[11, 22, 33, 44]]
        assert result.as_numpy("OUTPUT1").tolist() == [[-9, -18, -27, -36]]


def test_bls_from_a_forked_process_fails_clearly(api: Api) -> None:
    # The forked process would share the instance's connection and shared memory: refused there, not hung.
    with pytest.raises(InferenceServerException, match="from a process forked by the model") as refused:
        api.infer("bls_fork", INPUT0=fp32(1, 2, 3, 4).reshape(1, 4), INPUT1=fp32(1, 2, 3, 4).reshape(1, 4))
    assert "use threads" in refused.value.message()
    # The instance serves on.
    assert api.infer(
        "bls_python", INPUT0=fp32(1, 1, 1, 1).reshape(1, 4), INPUT1=fp32(1, 1, 1, 1).reshape(1, 4)
    )


def test_bls_async_execute_with_async_exec(api: Api) -> None:
    result = api.infer(
        "bls_async", INPUT0=fp32(1, 2, 3, 4).reshape(1, 4), INPUT1=fp32(10, 20, 30, 40).reshape(1, 4)
    )
    assert result.as_numpy("OUTPUT0").tolist() == [[11, 22, 33, 44]]
    assert result.as_numpy("OUTPUT1").tolist() == [[9, 18, 27, 36]]


def test_bls_into_a_decoupled_model_iterates_its_responses(api: Api) -> None:
    result = api.infer("bls_decoupled", IN=np.array([4, 5, 6], dtype=np.int32))
    assert result.as_numpy("SUM").tolist() == [15]
    assert result.as_numpy("COUNT").tolist() == [3]


def test_a_cancelled_decoupled_bls_stream_ends(http: httpclient.InferenceServerClient) -> None:
    # 50 responses 20 ms apart take 1 s. Responses reach the caller while the called model's execute still runs,
    # and the caller cancels after the first, so its request is answered while that execute goes on: the called
    # model's execution is not counted yet when the answer arrives. (HTTP only: the called model ignores the
    # cancellation and keeps its one instance busy for that second.)
    def executions() -> int:
        stats = http.get_inference_statistics("repeat_decoupled")["model_stats"][0]
        return int(stats["execution_count"])

    before = executions()
    result = Api("http", httpclient, http).infer("bls_cancel", IN=np.array([50], dtype=np.int32))
    assert result.as_numpy("FIRST").tolist() == [0]
    assert executions() == before


def test_bls_onnx_calls_an_onnx_model(api: Api) -> None:
    result = api.infer("bls_onnx", INPUT0=np.array([[1, 2, 3, 4]], dtype=np.int32))
    assert result.as_numpy("OUTPUT0").tolist() == [[4, 6, 8, 10]]
    assert result.as_numpy("OUTPUT0").dtype == np.int32


def test_bls_error_of_a_missing_model_is_in_the_response(api: Api) -> None:
    result = api.infer("bls_error", MODEL_NAME=np.array([b"does_not_exist"], dtype=np.object_))
    assert result.as_numpy("HAS_ERROR").tolist() == [True]
    assert result.as_numpy("MESSAGE").tolist() == [
        b"Model does_not_exist - Error when running inference: Failed for execute the inference request. "
        b"Model 'does_not_exist' is not ready."
    ]
    fine = api.infer("bls_error", MODEL_NAME=np.array([b"add_sub"], dtype=np.object_))
    assert fine.as_numpy("HAS_ERROR").tolist() == [False]
    assert fine.as_numpy("MESSAGE").tolist() == [b""]


def test_bls_error_returned_as_the_response_error(api: Api) -> None:
    inputs = api.inputs(MODEL_NAME=np.array([b"does_not_exist"], dtype=np.object_))
    error = failure(lambda: api.client.infer("bls_error", inputs, parameters={"return_error": True}))
    assert error.status() == api.status(500, grpc.StatusCode.INTERNAL)
    assert error.message() == (
        "Model does_not_exist - Error when running inference: Failed for execute the inference request. "
        "Model 'does_not_exist' is not ready."
    )


# --- decoupled models


@pytest.mark.parametrize("model", ["repeat_decoupled", "square_decoupled", "send_after_final"])
def test_http_infer_refuses_a_decoupled_model(http: httpclient.InferenceServerClient, model: str) -> None:
    api = Api("http", httpclient, http)
    inputs = {
        "repeat_decoupled": {"IN": np.array([1], dtype=np.int32), "DELAY": np.array([0], dtype=np.uint32)},
        "square_decoupled": {"IN": np.array([1], dtype=np.int32)},
        "send_after_final": {"INPUT0": fp32(1)},
    }[model]
    error = failure(lambda: api.infer(model, **inputs))
    assert error.status() == "501"
    assert error.message() == "HTTP end point doesn't support models with decoupled transaction policy"


def test_grpc_model_infer_refuses_a_decoupled_model(grpc_client: grpcclient.InferenceServerClient) -> None:
    api = Api("grpc", grpcclient, grpc_client)
    error = failure(lambda: api.infer("square_decoupled", IN=np.array([1], dtype=np.int32)))
    assert error.status() == str(grpc.StatusCode.UNIMPLEMENTED)
    assert error.message() == "ModelInfer RPC doesn't support models with decoupled transaction policy"


@dataclass
class StreamReply:
    request_id: str
    outputs: dict[str, list[Any]]
    final: bool | None  # the triton_final_response parameter, None when absent
    error: str | None = None


class Stream:
    """A gRPC ModelStreamInfer stream whose replies land in a queue, in order."""

    def __init__(self, url: str) -> None:
        self.client = grpcclient.InferenceServerClient(url)
        self.replies: queue.Queue[StreamReply] = queue.Queue()
        self.client.start_stream(callback=self._on_reply)
        self.api = Api("grpc", grpcclient, self.client)

    def _on_reply(
        self, result: grpcclient.InferResult | None, error: InferenceServerException | None
    ) -> None:
        if error is not None:
            self.replies.put(StreamReply("", {}, None, error.message()))
            return
        assert result is not None
        response = result.get_response()
        outputs = {o.name: result.as_numpy(o.name).tolist() for o in response.outputs}
        final = (
            response.parameters["triton_final_response"].bool_param
            if "triton_final_response" in (response.parameters)
            else None
        )
        self.replies.put(StreamReply(response.id, outputs, final))

    def send(self, model: str, request_id: str, empty_final: bool = False, **arrays: np.ndarray) -> None:
        self.client.async_stream_infer(
            model, self.api.inputs(**arrays), request_id=request_id, enable_empty_final_response=empty_final
        )

    def next(self, timeout: float = 10) -> StreamReply:
        return self.replies.get(timeout=timeout)

    def take(self, count: int) -> list[StreamReply]:
        return [self.next() for _ in range(count)]

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


@pytest.fixture
def stream(server: RunningServer) -> Iterator[Stream]:
    opened = Stream(server.grpc_url)
    try:
        yield opened
    finally:
        opened.close()


def repeat_inputs(*values: int) -> dict[str, np.ndarray]:
    return {"IN": np.array(values, dtype=np.int32), "DELAY": np.full(len(values), 10, dtype=np.uint32)}


def send_marker(stream: Stream) -> StreamReply:
    """A request to a non-decoupled model: its reply comes after whatever earlier requests still had to say."""
    ones = fp32(1, 1, 1, 1).reshape(1, 4)
    stream.send("add_sub", "marker", INPUT0=ones, INPUT1=ones)
    return stream.next()


def test_stream_repeat_with_the_empty_final_response(stream: Stream) -> None:
    stream.send("repeat_decoupled", "r1", empty_final=True, **repeat_inputs(4, 5, 6))
    assert stream.take(4) == [
        StreamReply("r1", {"OUT": [4], "IDX": [0]}, False),
        StreamReply("r1", {"OUT": [5], "IDX": [1]}, False),
        StreamReply("r1", {"OUT": [6], "IDX": [2]}, False),
        StreamReply("r1", {}, True),
    ]


def test_stream_repeat_without_the_empty_final_response(stream: Stream) -> None:
    stream.send("repeat_decoupled", "r2", **repeat_inputs(7, 8))
    assert stream.take(2) == [
        StreamReply("r2", {"OUT": [7], "IDX": [0]}, False),
        StreamReply("r2", {"OUT": [8], "IDX": [1]}, False),
    ]
    # the final flag alone yields nothing: the next reply is the marker's, final as any non-decoupled reply
    assert send_marker(stream) == StreamReply(
        "marker", {"OUTPUT0": [[2, 2, 2, 2]], "OUTPUT1": [[0, 0, 0, 0]]}, True
    )


def test_stream_repeat_of_nothing(stream: Stream) -> None:
    stream.send("repeat_decoupled", "none", **repeat_inputs())
    assert send_marker(stream).request_id == "marker"
    stream.send("repeat_decoupled", "none-final", empty_final=True, **repeat_inputs())
    assert stream.next() == StreamReply("none-final", {}, True)


def test_stream_error_response_of_a_decoupled_model(stream: Stream) -> None:
    stream.send(
        "repeat_decoupled", "bad", IN=np.array([1, 2], dtype=np.int32), DELAY=np.array([1], dtype=np.uint32)
    )
    assert stream.next().error == "expected IN and DELAY shape to match, got [2] and [1]."
    assert send_marker(stream).request_id == "marker"  # nothing more for "bad"


def test_a_decoupled_model_that_returns_responses_fails_its_requests(stream: Stream) -> None:
    # Triton's L0_backend_python decoupled test_decoupled_return_response_error (the stream waited forever).
    stream.send("decoupled_returns", "returns", IN=np.array([1], dtype=np.int32))
    error = stream.next().error
    assert error is not None
    assert (
        "Python model 'decoupled_returns_0' is using the decoupled mode and the execute function must "
        "return None." in error
    )
    assert send_marker(stream).request_id == "marker"


def test_stream_square(stream: Stream) -> None:
    stream.send("square_decoupled", "sq", empty_final=True, IN=np.array([3], dtype=np.int32))
    assert stream.take(4) == [StreamReply("sq", {"OUT": [3]}, False)] * 3 + [StreamReply("sq", {}, True)]


def test_stream_error_in_the_middle_of_a_request_lets_it_go_on(stream: Stream) -> None:
    stream.send("error_midstream", "mid", empty_final=True, IN=np.array([7], dtype=np.int32))
    assert stream.next().error == "first one failed"
    assert stream.take(2) == [StreamReply("mid", {"OUT": [7]}, False), StreamReply("mid", {}, True)]


def test_stream_of_many_responses_to_one_request(stream: Stream) -> None:
    # Far more responses than the server returns shared-memory blocks per message: the stub's memory is handed
    # back during the stream, not only with the next request.
    stream.send("square_decoupled", "many", empty_final=True, IN=np.array([500], dtype=np.int32))
    replies = stream.take(501)
    assert replies[:-1] == [StreamReply("many", {"OUT": [500]}, False)] * 500
    assert replies[-1] == StreamReply("many", {}, True)


def test_stream_send_after_final_raises_inside_the_model(stream: Stream) -> None:
    stream.send("send_after_final", "s1", empty_final=True, INPUT0=fp32(1))
    stream.send("send_after_final", "s2", empty_final=True, INPUT0=fp32(2))
    first, first_final, second, second_final = stream.take(4)
    assert (first.request_id, first.outputs["OUTPUT0"], first.final) == ("s1", [1], False)
    assert first_final == StreamReply("s1", {}, True)
    assert second == StreamReply(
        "s2",
        {
            "OUTPUT0": [2],
            "LAST_ERROR": [
                b"TritonModelException: Unable to send response. Response sender has been closed."
            ],
        },
        False,
    )
    assert second_final == StreamReply("s2", {}, True)


def test_stream_errors_of_faulty_models(stream: Stream) -> None:
    stream.send("error_response", "e1", INPUT0=fp32(1))
    assert stream.next().error == "bad thing"
    stream.send("exec_error", "e2", INPUT0=fp32(1))
    message = stream.next().error
    assert message is not None
    assert message.startswith(
        "Failed to process the request(s) for model 'exec_error_0', message: TritonModelException: "
        "exec_error: execute fails on purpose"
    )


# --- faulty models


@pytest.mark.parametrize(
    ("model", "reason", "where"),
    [
        pytest.param(
            "import_error",
            "Internal: ImportError: import_error: this model fails at import on purpose",
            "/import_error/1/model.py(3): <module>",
            id="import_error",
        ),
        pytest.param(
            "init_error",
            "Internal: TritonModelException: init_error: initialize fails on purpose",
            "/init_error/1/model.py(8): initialize",
            id="init_error",
        ),
        pytest.param(
            "bls_init_error",
            "Internal: TritonModelException: BLS is only supported during the 'execute' function.",
            "/bls_init_error/1/model.py(14): initialize",
            id="bls_init_error",
        ),
    ],
)
def test_load_failure_in_the_index_and_the_load_response(
    http: httpclient.InferenceServerClient,
    grpc_client: grpcclient.InferenceServerClient,
    model: str,
    reason: str,
    where: str,
) -> None:
    (row,) = [row for row in http.get_model_repository_index() if row["name"] == model]
    assert (row["version"], row["state"]) == ("1", "UNAVAILABLE")
    assert row["reason"].startswith(reason + "\n\nAt:\n")
    assert where in row["reason"]
    error = failure(lambda: http.load_model(model))
    assert error.status() == "400"
    assert error.message().startswith(
        f"load failed for model '{model}': version 1 is at UNAVAILABLE state: {reason}"
    )
    error = failure(lambda: grpc_client.load_model(model))
    assert error.status() == str(grpc.StatusCode.INVALID_ARGUMENT)
    assert error.message().startswith(
        f"load failed for model '{model}': version 1 is at UNAVAILABLE state: {reason}"
    )


@pytest.mark.parametrize("model", FAILING_TO_LOAD)
def test_a_model_that_failed_to_load_is_not_served(api: Api, model: str) -> None:
    assert not api.client.is_model_ready(model)
    error = failure(lambda: api.infer(model, INPUT0=fp32(1)))
    assert error.status() == api.status(404, grpc.StatusCode.NOT_FOUND)
    assert error.message() == f"Request for unknown model: '{model}' has no available versions"
    assert api.client.is_server_live()


def test_exec_error(api: Api) -> None:
    error = failure(lambda: api.infer("exec_error", INPUT0=fp32(1.5, 2.5)))
    assert error.status() == api.status(500, grpc.StatusCode.INTERNAL)
    assert error.message().startswith(
        "Failed to process the request(s) for model 'exec_error_0', message: TritonModelException: "
        "exec_error: execute fails on purpose\n\nAt:\n"
    )
    assert "/exec_error/1/model.py(8): execute" in error.message()


def test_wrong_number_of_responses(api: Api) -> None:
    error = failure(lambda: api.infer("wrong_count", INPUT0=fp32(1.5, 2.5)))
    assert error.status() == api.status(500, grpc.StatusCode.INTERNAL)
    assert error.message().rstrip("\n") == (
        "Failed to process the request(s) for model 'wrong_count_0', message: Number of InferenceResponse "
        "objects do not match the number of InferenceRequest objects. InferenceRequest(s) size is:1, and "
        "InferenceResponse(s) size is:2"
    )


def test_an_output_goes_out_in_the_data_type_the_model_gave_it(api: Api) -> None:
    # As Triton 2.51 (REFERENCE.md): an INT64 output passes through where the config says FP32 (Triton's BLS qa
    # models answer FP16 for an FP32 output, and their tests read it).
    result = api.infer("wrong_dtype", INPUT0=fp32(1.5, 2.5))
    output = result.get_output("OUTPUT0")
    assert (output["datatype"] if isinstance(output, dict) else output.datatype) == "INT64"
    assert result.as_numpy("OUTPUT0").tolist() == [1, 2]


def test_outputs_pass_through_in_the_shape_the_model_gave_them(api: Api) -> None:
    """As Triton's python backend (L0_backend_python test_init_args): an output's shape is the model's, whatever
    the config says; a requested output the model left out is left out of the response; a tensor nobody
    requested (here one the config does not even name) is dropped."""
    result = api.infer("loose_outputs", IN=np.zeros((2, 2), np.float32))
    assert result.as_numpy("OUT").tolist() == [7]
    assert result.as_numpy("EXTRA") is None
    assert result.as_numpy("UNDECLARED") is None
    outputs = result.get_response()["outputs"] if api.name == "http" else result.get_response().outputs
    names = [o["name"] for o in outputs] if api.name == "http" else [o.name for o in outputs]
    assert names == ["OUT"]


def test_error_response_keeps_its_code(api: Api) -> None:
    error = failure(lambda: api.infer("error_response", INPUT0=fp32(1.5, 2.5)))
    assert error.status() == api.status(400, grpc.StatusCode.INVALID_ARGUMENT)
    assert error.message() == "bad thing"


@pytest.mark.parametrize(
    ("code", "http_status", "grpc_code"),
    [
        (0, 400, grpc.StatusCode.UNKNOWN),  # Triton's HTTP server answers UNKNOWN with 400
        (1, 500, grpc.StatusCode.INTERNAL),
        (2, 404, grpc.StatusCode.NOT_FOUND),
        (4, 503, grpc.StatusCode.UNAVAILABLE),
        (5, 501, grpc.StatusCode.UNIMPLEMENTED),
        (6, 400, grpc.StatusCode.ALREADY_EXISTS),
        (7, 400, grpc.StatusCode.CANCELLED),
    ],
)
def test_each_error_code_reaches_the_client(
    api: Api, code: int, http_status: int, grpc_code: grpc.StatusCode
) -> None:
    # Triton's L0_backend_python lifecycle test_error_code: the code of pb_utils.TritonError is the status.
    error = failure(lambda: api.infer("error_response", INPUT0=fp32(-(code + 1))))
    assert error.status() == api.status(http_status, grpc_code)
    assert error.message() == "bad thing"


def test_a_model_sees_the_argv_of_tritons_embedded_interpreter(api: Api) -> None:
    # Not the stub's own arguments: Triton's BLS qa models call unittest.main(), which took them for test names.
    assert api.infer("sys_argv", INPUT0=fp32(1)).as_numpy("ARGV").tolist() == [b""]


def test_a_grpc_deadline_cancels_the_hanging_request(grpc_client: grpcclient.InferenceServerClient) -> None:
    api = Api("grpc", grpcclient, grpc_client)
    hang = api.inputs(INPUT0=fp32(1), HANG_S=fp32(20))
    error = failure(lambda: grpc_client.infer("hangs", hang, client_timeout=1.0))
    assert error.status() == str(grpc.StatusCode.DEADLINE_EXCEEDED)
    assert error.message() == "Deadline Exceeded"
    # the model sees request.is_cancelled() and stops: its one instance is free again long before 20 s
    result = grpc_client.infer("hangs", api.inputs(INPUT0=fp32(2)), client_timeout=5.0)
    assert result.as_numpy("OUTPUT0").tolist() == [2]


# --- a crashing stub


def serves_crashing(client: httpclient.InferenceServerClient) -> bool:
    try:
        result = Api("http", httpclient, client).infer("crashing", INPUT0=fp32(7))
    except InferenceServerException:
        return False
    return bool(result.as_numpy("OUTPUT0").tolist() == [7])


@pytest.mark.parametrize(("protocol", "how"), [("http", 1), ("grpc", 9)], ids=["os._exit", "SIGKILL"])
def test_a_crashed_stub_fails_the_request_then_the_model_serves_again(
    http: httpclient.InferenceServerClient,
    grpc_client: grpcclient.InferenceServerClient,
    protocol: str,
    how: int,
) -> None:
    poll(lambda: serves_crashing(http), 30, "crashing serves before the test")
    api = Api("http", httpclient, http) if protocol == "http" else Api("grpc", grpcclient, grpc_client)
    error = failure(lambda: api.infer("crashing", INPUT0=fp32(1), CRASH=np.array([how], dtype=np.int32)))
    assert error.status() == api.status(500, grpc.StatusCode.INTERNAL)
    # Triton 2.51 answers "Stub process 'crashing_0' is not healthy." to this request and every later one: it
    # keeps the model READY but broken until it is unloaded and loaded again (REFERENCE.md). modelhost restarts
    # the stub instead, its own wording naming the model: the model may be unready for a moment (too short to
    # assert), then it serves again by itself, and the server stays live throughout.
    assert "'crashing" in error.message()
    poll(lambda: serves_crashing(http), 30, "crashing serves again after the crash")
    assert http.is_model_ready("crashing")
    assert http.is_server_live()


def test_a_crashed_stub_fails_only_the_request_it_was_running(
    server: RunningServer, http: httpclient.InferenceServerClient
) -> None:
    """Requests sent to a stub behind the one it runs had not begun when it died: the restarted stub runs them."""
    poll(lambda: serves_crashing(http), 30, "crashing serves before the test")

    def infer(value: float, crash: int = 0) -> Any:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)  # one per thread
        inputs = {"INPUT0": fp32(value)} | ({"CRASH": np.array([crash], np.int32)} if crash else {})
        return Api("http", httpclient, client).infer("crashing", **inputs)

    with ThreadPoolExecutor(4) as pool:
        doomed = pool.submit(failure, lambda: infer(1, crash=3))
        time.sleep(0.5)  # it is in the model's execute now, for a second, before the stub kills itself
        behind = [pool.submit(infer, value) for value in (10, 20, 30)]
        assert [f.result().as_numpy("OUTPUT0").tolist() for f in behind] == [[10], [20], [30]]
        assert doomed.result().status() == "500"
    assert http.is_model_ready("crashing")


# --- iterative sequences (request rescheduling)


def test_an_iterative_sequence_runs_a_request_until_the_model_releases_it(server: RunningServer) -> None:
    """A decoupled model hands its request back after each response; each execution sees the same sequence id
    (one of the server's: the request has none), START on the first only."""
    replies: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: replies.put(error or result))
    try:
        for count in (3, 2):  # two requests, two sequences
            inputs = Api("grpc", grpcclient, client).inputs(IN=np.array([count], np.int32))
            client.async_stream_infer("countdown", inputs)
        got = [replies.get(timeout=30) for _ in range(5)]
    finally:
        client.stop_stream()
        client.close()
    answers = [(int(r.as_numpy("OUT")[0]), grpc_parameters(r.get_response().parameters)) for r in got]
    sequences = {p["sequence"] for _, p in answers}
    assert len(sequences) == 2 and 0 not in sequences
    by_sequence = {s: [(out, p["first"]) for out, p in answers if p["sequence"] == s] for s in sequences}
    assert sorted(by_sequence.values()) == [[(1, True), (0, False)], [(2, True), (1, False), (0, False)]]
    assert all(p["triton_final_response"] == (out == 0) for out, p in answers)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_rescheduled_request_is_answered_by_its_next_execution(
    server: RunningServer, protocol: str
) -> None:
    a, b = fp32(1, 2, 3, 4), fp32(10, 20, 30, 40)

    def infer(_: int) -> Any:  # a client per thread: tritonclient's HTTP client is not thread-safe
        if protocol == "http":
            client: Any = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
            return Api("http", httpclient, client).infer("reschedule_once", INPUT0=a, INPUT1=b)
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            return Api("grpc", grpcclient, client).infer("reschedule_once", INPUT0=a, INPUT1=b)

    with ThreadPoolExecutor(3) as pool:  # one instance: the three sequences take its slot in turn
        results = list(pool.map(infer, range(3)))
    for result in results:
        assert result.as_numpy("OUTPUT0").tolist() == [11, 22, 33, 44]
        assert result.as_numpy("RUNS").tolist() == [2]


def test_a_response_for_a_rescheduled_request_breaks_the_contract(
    http: httpclient.InferenceServerClient,
) -> None:
    error = failure(
        lambda: Api("http", httpclient, http).infer("reschedule_answered", INPUT0=fp32(1, 2, 3, 4))
    )
    assert error.status() == "500"
    assert (
        "Expected a None object in the execute function return list for reschduled request" in error.message()
    )


def test_rescheduling_outside_an_iterative_sequence_is_refused(
    http: httpclient.InferenceServerClient,
) -> None:
    error = failure(
        lambda: Api("http", httpclient, http).infer("reschedule_unscheduled", INPUT0=fp32(1, 2, 3, 4))
    )
    assert error.status() == "500"
    assert "only an iterative sequence can run again" in error.message()
    assert "'reschedule_unscheduled'" in error.message()


# --- response parameters


def grpc_parameters(parameters: Any) -> dict[str, Any]:
    return {key: getattr(value, value.WhichOneof("parameter_choice")) for key, value in parameters.items()}


def test_response_parameters_reach_http_and_grpc_with_their_types(
    http: httpclient.InferenceServerClient, grpc_client: grpcclient.InferenceServerClient
) -> None:
    expected = {"tag": "hello", "count": 3, "doubled": True}
    for api in (Api("http", httpclient, http), Api("grpc", grpcclient, grpc_client)):
        result = api.client.infer(
            "response_params", api.inputs(INPUT0=fp32(1, 2, 3)), parameters={"tag": "hello"}
        )
        assert result.as_numpy("OUTPUT0").tolist() == [1, 2, 3]
        response = result.get_response()
        if api.name == "http":
            assert response["parameters"] == expected
        else:
            assert grpc_parameters(response.parameters) == expected


def test_a_decoupled_models_response_parameters_reach_the_stream(server: RunningServer) -> None:
    replies: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: replies.put(error or result.get_response()))
    try:
        api = Api("grpc", grpcclient, client)
        client.async_stream_infer(
            "response_params_decoupled", api.inputs(INPUT0=fp32(5, 6)), parameters={"tag": "streamed"}
        )
        got = [grpc_parameters(replies.get(timeout=30).parameters) for _ in range(2)]
    finally:
        client.stop_stream()
        client.close()
    base = {"tag": "streamed", "count": 2, "doubled": True, "triton_final_response": False}
    assert got == [base | {"index": 0}, base | {"index": 1}]


def test_response_parameters_reach_generate(server: RunningServer) -> None:
    r = requests.post(
        f"http://{server.http_url}/v2/models/response_params/generate",
        json={"INPUT0": [4.0], "parameters": {"tag": "generated"}},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["OUTPUT0"] == 4.0  # one element: a scalar, as Triton answers it
    assert (body["tag"], body["count"], body["doubled"]) == ("generated", 1, True)


# --- custom metrics


METRIC_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")


def scrape(server: RunningServer) -> tuple[str, dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    text = requests.get(f"http://localhost:{server.metrics_port}/metrics", timeout=10).text
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for line in text.splitlines():
        match = METRIC_LINE.match(line)
        if match:
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', match["labels"] or ""))
            samples[(match["name"], labels)] = float(match["value"])
    return text, samples


def test_custom_metrics(server: RunningServer, http: httpclient.InferenceServerClient) -> None:
    labels = {("model", "metrics_model"), ("version", "1")}

    def key(name: str, **extra: str) -> tuple[str, frozenset[tuple[str, str]]]:
        return name, frozenset(labels | set(extra.items()))

    _, before = scrape(server)
    api = Api("http", httpclient, http)
    api.infer("metrics_model", INPUT0=fp32(1, 2, 3))  # sum 6
    api.infer("metrics_model", INPUT0=fp32(20, 40))  # sum 60, 2 elements
    text, after = scrape(server)

    def delta(name: str, **extra: str) -> float:
        return after[key(name, **extra)] - before.get(key(name, **extra), 0.0)

    for line in (
        "# HELP custom_requests_total Requests seen by metrics_model",
        "# TYPE custom_requests_total counter",
        "# HELP custom_last_input_size Elements of the last INPUT0",
        "# TYPE custom_last_input_size gauge",
        "# HELP custom_input_sum Sum of INPUT0",
        "# TYPE custom_input_sum histogram",
    ):
        assert line in text.splitlines()
    assert delta("custom_requests_total") == 2
    assert after[key("custom_last_input_size")] == 2
    assert delta("custom_input_sum_count") == 2
    assert delta("custom_input_sum_sum") == 66
    assert [delta("custom_input_sum_bucket", le=le) for le in ("1", "10", "100", "+Inf")] == [0, 1, 2, 2]
