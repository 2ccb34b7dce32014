"""Sequence batching end to end, through tritonclient HTTP and gRPC: stateful python models pinned to their
instance, control inputs, implicit state of an ONNX model, the backlog, and every bad sequence request."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper

from e2e.clients import Api, failure
from e2e.models import save, write_config
from e2e.server_process import RunningServer, running_server

SEQUENCE_MODELS = Path(__file__).parent / "sequence_models"


def add_onnx_state_accumulator(
    repo: Path,
    name: str = "onnx_state_acc",
    *,
    max_batch_size: int = 4,
    strategy: str = "",
    instances: int = 2,
) -> None:
    """OUTPUT = INPUT + STATE_IN, STATE_OUT = the same: a running sum held by the server as implicit state.

    As in Triton, the state input and output are graph tensors the config does not list: the sequence batcher
    feeds STATE_IN, and a client may not. `strategy`: more of `sequence_batching` (direct or oldest, idle)."""
    int32 = TensorProto.INT32
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT", "STATE_IN"], ["OUTPUT"]),
            helper.make_node("Identity", ["OUTPUT"], ["STATE_OUT"]),
        ],
        "state_acc",
        [
            helper.make_tensor_value_info("INPUT", int32, ["batch", 1]),
            helper.make_tensor_value_info("STATE_IN", int32, ["batch", 1]),
        ],
        [
            helper.make_tensor_value_info("OUTPUT", int32, ["batch", 1]),
            helper.make_tensor_value_info("STATE_OUT", int32, ["batch", 1]),
        ],
    )
    save(graph, repo / name / "1" / "model.onnx")
    write_config(
        repo / name,
        f'backend: "onnxruntime"\nmax_batch_size: {max_batch_size}\n'
        'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        f"sequence_batching {{\n  {strategy}\n"
        '  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ]\n'
        '            initial_state [ { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zeros" } ] } ]\n'
        "}\n"
        f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]\n",
    )


def add_onnx_growing_state(repo: Path, name: str = "onnx_growing_state") -> None:
    """STATE_OUT = STATE_IN with INPUT appended (the state grows by one element a step), OUTPUT = its sum and
    LENGTH = its length: a history kept by the server, in growable memory that it never copies."""
    int32, int64 = TensorProto.INT32, TensorProto.INT64
    graph = helper.make_graph(
        [
            helper.make_node("Concat", ["STATE_IN", "INPUT"], ["STATE_OUT"], axis=0),
            helper.make_node("ReduceSum", ["STATE_OUT", "AXES"], ["OUTPUT"], keepdims=1),
            helper.make_node("Shape", ["STATE_OUT"], ["LENGTH"]),
        ],
        "growing_state",
        [
            helper.make_tensor_value_info("INPUT", int32, [1]),
            helper.make_tensor_value_info("STATE_IN", int32, ["n"]),
        ],
        [
            helper.make_tensor_value_info("OUTPUT", int32, [1]),
            helper.make_tensor_value_info("LENGTH", int64, [1]),
            helper.make_tensor_value_info("STATE_OUT", int32, ["m"]),
        ],
        initializer=[helper.make_tensor("AXES", int64, [1], [0])],
    )
    save(graph, repo / name / "1" / "model.onnx")
    write_config(
        repo / name,
        'backend: "onnxruntime"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] },\n'
        '         { name: "LENGTH" data_type: TYPE_INT64 dims: [ 1 ] } ]\n'
        "sequence_batching {\n"
        '  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ -1 ]\n'
        "            use_same_buffer_for_input_output: true use_growable_memory: true\n"
        '            initial_state [ { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" } ] } ]\n'
        "}\n"
        "instance_group [ { count: 2 kind: KIND_CPU } ]\n",  # a slot each for the test's two sequences
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("sequence_repo")
    for model in SEQUENCE_MODELS.iterdir():
        if (model / "config.pbtxt").exists():
            shutil.copytree(model, repo / model.name)
    add_onnx_state_accumulator(repo)
    add_onnx_growing_state(repo)
    # One slot in all (Triton's L0_request_cancellation implicit state model): a second sequence waits in the
    # backlog; the idle release is far off, so that only an END frees the slot.
    add_onnx_state_accumulator(
        repo,
        "onnx_state_one_slot",
        max_batch_size=1,
        strategy="max_sequence_idle_microseconds: 60000000 oldest { max_candidate_sequences: 1 }",
        instances=1,
    )
    with running_server([repo], tmp_path_factory.mktemp("log") / "server.log") as running:
        yield running


def step(api: Api, model: str, corrid: int | str, value: int, start: bool = False, end: bool = False) -> Any:
    inputs = api.inputs(INPUT=np.array([[value]], dtype=np.int32))
    return api.client.infer(model, inputs, sequence_id=corrid, sequence_start=start, sequence_end=end)


def test_python_sequences_keep_their_state_on_their_instance(api: Api) -> None:
    a, b = (101, 102) if api.name == "http" else ("seq-a", "seq-b")
    plan = [
        (a, 1, True, False),
        (b, 10, True, False),
        (a, 2, False, False),
        (b, 20, False, False),
        (a, 3, False, True),
        (b, 30, False, True),
    ]
    sums: dict[int | str, list[int]] = {a: [], b: []}
    flags: dict[int | str, list[int]] = {a: [], b: []}
    pids: dict[int | str, set[int]] = {a: set(), b: set()}
    for corrid, value, start, end in plan:
        result = step(api, "py_accumulator", corrid, value, start, end)
        sums[corrid].append(int(result.as_numpy("OUTPUT")[0, 0]))
        flags[corrid].append(int(result.as_numpy("FLAGS")[0, 0]))
        pids[corrid].add(int(result.as_numpy("PID")[0, 0]))
    assert sums == {a: [1, 3, 6], b: [10, 30, 60]}
    assert flags == {a: [1, 0, 2], b: [1, 0, 2]}
    assert len(pids[a]) == 1 and len(pids[b]) == 1  # each sequence stayed on one instance's process
    assert pids[a] != pids[b]  # and the two sequences were spread over both instances
    single = step(api, "py_accumulator", a, 7, start=True, end=True)
    assert int(single.as_numpy("FLAGS")[0, 0]) == 3


def test_many_concurrent_sequences_beyond_the_slots(server: RunningServer) -> None:
    # 2 instances x 4 slots: 12 sequences at once, the last ones wait in the backlog for a slot.
    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def sequence(corrid: int) -> None:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        api = Api("grpc", grpcclient, client)
        try:
            results[corrid] = [
                int(step(api, "py_accumulator", corrid, v, v == 1, v == 4).as_numpy("OUTPUT")[0, 0])
                for v in range(1, 5)
            ]
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)
        finally:
            client.close()

    threads = [threading.Thread(target=sequence, args=(1000 + i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert results == {1000 + i: [1, 3, 6, 10] for i in range(12)}


def test_control_inputs_are_fed_by_the_server(api: Api) -> None:
    first = step(api, "py_controls", 77, 0, start=True)
    last = step(api, "py_controls", 77, 0, end=True)
    for result, start, end in ((first, 1, 0.0), (last, 0, 1.0)):
        assert result.as_numpy("OUT_START").tolist() == [[start]]  # [batch, 1], batch 1
        assert result.as_numpy("OUT_END").tolist() == [[end]]
        assert result.as_numpy("OUT_READY").tolist() == [[True]]
        assert result.as_numpy("OUT_CORRID").tolist() == [[77]]


def test_implicit_state_of_an_onnx_model(api: Api) -> None:
    corrid = 5 if api.name == "http" else "state-seq"
    sums = []
    for value, start, end in ((4, True, False), (5, False, False), (6, False, True), (1, True, True)):
        result = step(api, "onnx_state_acc", corrid, value, start, end)
        sums.append(int(result.as_numpy("OUTPUT")[0, 0]))
        assert result.as_numpy("STATE_OUT") is None  # state is the server's, not an answer
    assert sums == [4, 9, 15, 1]


def test_queued_requests_of_a_backlogged_sequence_read_the_state_their_predecessor_wrote(
    server: RunningServer,
) -> None:
    # Triton's L0_request_cancellation test_state_reset_after_cancel, in the part that failed here: a sequence
    # whose requests all queued in the backlog runs them back to back once it gets the slot, and each must see
    # the state the one before it left (it saw the initial state again: the next request started before the
    # completion of the previous one kept its state).
    answers: dict[str, int] = {}
    errors: list[Any] = []

    def callback(result: Any, error: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            answers[result.get_response().id] = int(result.as_numpy("OUTPUT")[0, 0])

    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback)
    plan = [("a1", 11, 100, True, False)]  # sequence 11 takes the only slot and keeps it until its END
    plan += [(f"b{v}", 12, v, v == 1, v == 4) for v in (1, 2, 3, 4)]  # sequence 12 queues in the backlog
    plan += [("a2", 11, 0, False, True)]  # frees the slot: sequence 12's four requests go back to back
    for request_id, corrid, value, start, end in plan:
        inputs = [grpcclient.InferInput("INPUT", [1, 1], "INT32")]
        inputs[0].set_data_from_numpy(np.array([[value]], dtype=np.int32))
        client.async_stream_infer(
            "onnx_state_one_slot",
            inputs,
            request_id=request_id,
            sequence_id=corrid,
            sequence_start=start,
            sequence_end=end,
        )
    client.stop_stream()  # waits for every answer
    client.close()
    assert not errors
    assert answers == {"a1": 100, "a2": 100, "b1": 1, "b2": 3, "b3": 6, "b4": 10}


def test_a_backlogged_sequence_whose_request_times_out_is_rejected(api: Api) -> None:
    """Triton's L0_sequence_batcher request-timeout rule: a timeout expires only while the sequence waits in the
    backlog, and then rejects it whole; its next request has no sequence to join."""
    holder, late = (21, 22) if api.name == "http" else ("hold", "late")
    step(api, "onnx_state_one_slot", holder, 5, start=True)  # takes the only slot and keeps it
    try:
        inputs = api.inputs(INPUT=np.array([[1]], dtype=np.int32))
        error = failure(
            lambda: api.client.infer(
                "onnx_state_one_slot", inputs, sequence_id=late, sequence_start=True, timeout=200_000
            )
        )
        assert error.status() == api.status(503, grpc.StatusCode.UNAVAILABLE)
        assert error.message() == "timeout of the corresponding sequence has been expired"
        error = failure(lambda: step(api, "onnx_state_one_slot", late, 2, end=True))
        assert "must specify the START flag on the first request of the sequence" in error.message()
        # In its slot, a request waits without a deadline: the holder goes on.
        inputs = api.inputs(INPUT=np.array([[1]], dtype=np.int32))
        result = api.client.infer("onnx_state_one_slot", inputs, sequence_id=holder, timeout=1)
        assert int(result.as_numpy("OUTPUT")[0, 0]) == 6
    finally:
        step(api, "onnx_state_one_slot", holder, 0, end=True)


def test_implicit_state_in_growable_memory_grows_step_by_step(api: Api) -> None:
    corrids = (31, 32) if api.name == "http" else ("grow-a", "grow-b")
    got: dict[Any, list[tuple[int, int]]] = {c: [] for c in corrids}
    for step_number in range(1, 6):
        for offset, corrid in enumerate(corrids):
            inputs = api.inputs(INPUT=np.array([step_number * (offset + 1)], dtype=np.int32))
            result = api.client.infer(
                "onnx_growing_state", inputs, sequence_id=corrid, sequence_start=step_number == 1,
                sequence_end=step_number == 5,
            )  # fmt: skip
            got[corrid].append((int(result.as_numpy("OUTPUT")[0]), int(result.as_numpy("LENGTH")[0])))
    assert got[corrids[0]] == [(1, 2), (3, 3), (6, 4), (10, 5), (15, 6)]  # the initial 0, then 1..5
    assert got[corrids[1]] == [(2, 2), (6, 3), (12, 4), (20, 5), (30, 6)]


def test_preserve_ordering_answers_in_arrival_order(server: RunningServer) -> None:
    """A slow request of one sequence, then a fast one of another on the other instance: the fast one finishes
    first, and is answered second."""
    answers: list[str] = []
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(lambda result, error: answers.append(error or result.get_response().id))
    for request_id, corrid, sleep_ms in (("slow", 41, 600), ("fast", 42, 1)):
        inputs = [grpcclient.InferInput("INPUT", [1, 1], "INT32")]
        inputs[0].set_data_from_numpy(np.array([[sleep_ms]], dtype=np.int32))
        client.async_stream_infer(
            "py_ordered",
            inputs,
            request_id=request_id,
            sequence_id=corrid,
            sequence_start=True,
            sequence_end=True,
        )
    client.stop_stream()  # waits for both answers
    client.close()
    assert answers == ["slow", "fast"]


def test_metadata_leaves_out_server_fed_inputs(api: Api) -> None:
    metadata = api.client.get_model_metadata("onnx_state_acc")
    names = (
        [i["name"] for i in metadata["inputs"]] if api.name == "http" else [i.name for i in metadata.inputs]
    )
    assert names == ["INPUT"]


def _bad(api: Api, call: Any, message: str) -> None:
    error = failure(call)
    assert error.status() == api.status(400, grpc.StatusCode.INVALID_ARGUMENT)
    assert error.message() == message


def test_bad_sequence_requests_and_the_server_serves_on(api: Api) -> None:
    model = "py_accumulator"
    _bad(
        api,
        lambda: step(api, model, 9001, 1),
        f"inference request for sequence 9001 to model '{model}' must specify the START flag on the first request "
        "of the sequence",
    )
    zero = f"inference request to model '{model}' must specify a non-zero or non-empty correlation ID"
    _bad(api, lambda: step(api, model, 0, 1, start=True), zero)
    _bad(api, lambda: api.client.infer(model, api.inputs(INPUT=np.array([[1]], dtype=np.int32))), zero)
    _bad(
        api,
        lambda: api.client.infer(
            model,
            api.inputs(INPUT=np.array([[1], [2]], dtype=np.int32)),
            sequence_id=9002,
            sequence_start=True,
        ),
        f"inference request to model '{model}' must specify batch-size 1 due to requirements of sequence batcher",
    )
    step(api, model, 9003, 1, start=True, end=True)
    _bad(
        api,
        lambda: step(api, model, 9003, 1),
        f"inference request for sequence 9003 to model '{model}' must specify the START flag on the first request "
        "of the sequence",
    )
    _bad(
        api,
        lambda: api.client.infer(
            "py_controls",
            api.inputs(INPUT=np.array([[1]], dtype=np.int32), START=np.array([[1]], dtype=np.int32)),
            sequence_id=9004,
            sequence_start=True,
        ),
        # Triton's count check comes first: a control input is not among the inputs a client may send.
        "[request id: <id_unknown>] expected 1 inputs but got 2 inputs for model 'py_controls'. Got input(s) "
        "['INPUT','START'], but missing required input(s) []. Please provide all required input(s).",
    )
    _bad(
        api,
        lambda: api.client.infer(
            "onnx_state_acc",
            api.inputs(INPUT=np.array([[1]], dtype=np.int32), STATE_IN=np.array([[1]], dtype=np.int32)),
            sequence_id=9005,
            sequence_start=True,
        ),
        "[request id: <id_unknown>] expected 1 inputs but got 2 inputs for model 'onnx_state_acc'. Got input(s) "
        "['INPUT','STATE_IN'], but missing required input(s) []. Please provide all required input(s).",
    )
    # In place of a model input, a control input is an unknown one.
    _bad(
        api,
        lambda: api.client.infer(
            "py_controls",
            api.inputs(READY=np.array([[1]], dtype=np.int32)),
            sequence_id=9006,
            sequence_start=True,
        ),
        "unexpected inference input 'READY' for model 'py_controls'",
    )
    # still serving, and nothing of the refused requests was left behind
    assert int(step(api, model, 9001, 8, start=True, end=True).as_numpy("OUTPUT")[0, 0]) == 8


def test_statistics_count_sequence_executions(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    api = Api("http", httpclient, client)
    before = client.get_inference_statistics("onnx_state_acc")["model_stats"][0]
    step(api, "onnx_state_acc", 321, 1, start=True)
    step(api, "onnx_state_acc", 321, 1, end=True)
    after = client.get_inference_statistics("onnx_state_acc")["model_stats"][0]
    assert after["execution_count"] - before["execution_count"] == 2
    assert after["inference_count"] - before["inference_count"] == 2
    assert after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"] == 2
    client.close()


def test_bls_requests_carry_the_sequence_on(api: Api) -> None:
    corrid = 606 if api.name == "http" else "bls-seq"
    sums = [
        int(step(api, "py_bls_sequence", corrid, value, start, end).as_numpy("OUTPUT")[0, 0])
        for value, start, end in ((2, True, False), (3, False, False), (4, False, True))
    ]
    assert sums == [2, 5, 9]
    error = failure(lambda: step(api, "py_bls_sequence", corrid, 1))  # ended: py_accumulator wants a START
    assert "must specify the START flag on the first request of the sequence" in error.message()
