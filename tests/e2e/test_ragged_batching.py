"""Ragged batching end to end: requests of different lengths in one batch of an ONNX model that reads the batch
input telling where each request's data lies, and a scattered batch output (Triton's ragged batching)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper

from e2e.models import save, write_config
from e2e.server_process import RunningServer, running_server


def add_segment_sum(repo: Path, name: str, scheduling: str) -> None:
    """INPUT: every request's numbers, concatenated (ragged, 1-D); ACCZ: the batch input
    BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO. SUM: one row per request, the sum of its numbers; DOUBLE: every
    number doubled, scattered back to the requests in the shape of their INPUT."""
    fp32, i64 = TensorProto.FLOAT, TensorProto.INT64

    def const(name: str, kind: int, values: list[float] | list[int]) -> helper.NodeProto:
        return helper.make_node(
            "Constant", [], [name], value=helper.make_tensor(name + "_v", kind, [len(values)], values)
        )

    nodes = [
        const("axis", i64, [0]),
        const("zero", fp32, [0.0]),
        const("one", i64, [1]),
        const("big", i64, [2**62]),
        const("first", i64, [0]),
        const("minus_one", i64, [-1]),
        const("two", fp32, [2.0]),
        helper.make_node("CumSum", ["INPUT", "axis"], ["running"]),
        helper.make_node("Concat", ["zero", "running"], ["running0"], axis=0),
        helper.make_node("Cast", ["ACCZ"], ["bounds"], to=i64),
        helper.make_node("Slice", ["bounds", "one", "big"], ["ends"]),
        helper.make_node("Slice", ["bounds", "first", "minus_one"], ["starts"]),
        helper.make_node("Gather", ["running0", "ends"], ["at_end"]),
        helper.make_node("Gather", ["running0", "starts"], ["at_start"]),
        helper.make_node("Sub", ["at_end", "at_start"], ["sums"]),
        helper.make_node("Unsqueeze", ["sums", "one"], ["SUM"]),
        helper.make_node("Mul", ["INPUT", "two"], ["DOUBLE"]),
    ]
    graph = helper.make_graph(
        nodes,
        name,
        [
            helper.make_tensor_value_info("INPUT", fp32, ["n"]),
            helper.make_tensor_value_info("ACCZ", TensorProto.INT32, ["r"]),
        ],
        [
            helper.make_tensor_value_info("SUM", fp32, ["b", 1]),
            helper.make_tensor_value_info("DOUBLE", fp32, ["n"]),
        ],
    )
    save(graph, repo / name / "1" / "model.onnx")
    write_config(
        repo / name,
        """
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
batch_input [ { kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO target_name: "ACCZ" data_type: TYPE_INT32
                source_input: "INPUT" } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] }, { name: "DOUBLE" data_type: TYPE_FP32 dims: [ -1 ] } ]
batch_output [ { target_name: "DOUBLE" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "INPUT" } ]
{scheduling}
instance_group [ { count: 1 kind: KIND_CPU } ]
""".replace("{scheduling}", scheduling),
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("ragged_repo")
    add_segment_sum(repo, "segment_sum", "dynamic_batching { }")
    add_segment_sum(repo, "segment_sum_alone", "")  # no batcher: each request runs as a batch of one
    # Triton's test hook: the batcher holds requests until 3 are queued, so the batch below is exact.
    env = {**os.environ, "TRITONSERVER_DELAY_SCHEDULER": "3"}
    with running_server([repo], tmp_path_factory.mktemp("log") / "server.log", env=env) as running:
        yield running


def _infer(
    server: RunningServer, values: list[float], model: str = "segment_sum"
) -> tuple[np.ndarray, np.ndarray]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        tensor = httpclient.InferInput("INPUT", [1, len(values)], "FP32")
        tensor.set_data_from_numpy(np.array([values], dtype=np.float32))
        result = client.infer(model, [tensor])
        return result.as_numpy("SUM"), result.as_numpy("DOUBLE")
    finally:
        client.close()


def test_requests_of_different_lengths_run_as_one_batch(server: RunningServer) -> None:
    requests = [[1.0, 2.0, 3.0], [10.0], [4.0, 5.0, 6.0, 7.0, 8.0]]
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda v: _infer(server, v), requests))
    for values, (total, doubled) in zip(requests, answers, strict=True):
        np.testing.assert_array_equal(total, [[sum(values)]])
        np.testing.assert_array_equal(doubled, [[2 * v for v in values]])
    client = httpclient.InferenceServerClient(server.http_url)
    stats = client.get_inference_statistics("segment_sum")["model_stats"][0]
    client.close()
    assert stats["execution_count"] == 1
    assert [b["batch_size"] for b in stats["batch_stats"]] == [3]


def test_the_batch_input_is_not_a_client_input(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        metadata = client.get_model_metadata("segment_sum")
    finally:
        client.close()
    assert [i["name"] for i in metadata["inputs"]] == ["INPUT"]


def test_a_model_without_a_batcher_gets_the_batch_input_too(server: RunningServer) -> None:
    total, doubled = _infer(server, [1.5, 2.5], "segment_sum_alone")
    np.testing.assert_array_equal(total, [[4.0]])
    np.testing.assert_array_equal(doubled, [[3.0, 5.0]])
