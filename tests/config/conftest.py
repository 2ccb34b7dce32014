"""Fixtures of the config tests: tiny ONNX models written with the `onnx` package into a model repository."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

Dim = int | str | None
TensorSpec = tuple[str, int, Sequence[Dim]]


def write_onnx(
    path: Path,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    nodes: Sequence[onnx.NodeProto],
    initializers: Sequence[onnx.TensorProto] = (),
) -> Path:
    """Write a small ONNX model (opset 17, IR version 8 so onnxruntime loads it)."""
    graph = helper.make_graph(
        list(nodes),
        "test_graph",
        [helper.make_tensor_value_info(name, dtype, list(shape)) for name, dtype, shape in inputs],
        [helper.make_tensor_value_info(name, dtype, list(shape)) for name, dtype, shape in outputs],
        initializer=list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def add_sub_model(path: Path, dtype: int = TensorProto.INT32, shape: Sequence[Dim] = ("batch", 16)) -> Path:
    """INPUT0, INPUT1 -> OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (Triton's qa "simple" model)."""
    specs = [("INPUT0", dtype, shape), ("INPUT1", dtype, shape)]
    outs = [("OUTPUT0", dtype, shape), ("OUTPUT1", dtype, shape)]
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
    ]
    return write_onnx(path, specs, outs, nodes)


def fixed_batch_model(path: Path) -> Path:
    """An identity model with a fixed first dimension (3): it cannot batch."""
    nodes = [helper.make_node("Identity", ["X"], ["Y"])]
    return write_onnx(path, [("X", TensorProto.FLOAT, [3, 4])], [("Y", TensorProto.FLOAT, [3, 4])], nodes)


def reduce_model(path: Path) -> Path:
    """X [batch, 4] -> SUM [batch]: a scalar per batch item."""
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    nodes = [helper.make_node("ReduceSum", ["X", "axes"], ["SUM"], keepdims=0)]
    return write_onnx(
        path,
        [("X", TensorProto.FLOAT, ["batch", 4])],
        [("SUM", TensorProto.FLOAT, ["batch"])],
        nodes,
        initializers=[axes],
    )


ModelFactory = Callable[..., Path]


@pytest.fixture
def make_model(repo: Path) -> ModelFactory:
    """make_model(name, config_text=None, builder=add_sub_model, versions=(1,)) -> the model directory."""

    def _make(
        name: str,
        config_text: str | None = None,
        builder: Callable[[Path], Path] = add_sub_model,
        versions: Sequence[int] = (1,),
    ) -> Path:
        model_dir = repo / name
        model_dir.mkdir()
        for version in versions:
            builder(model_dir / str(version) / "model.onnx")
        if config_text is not None:
            (model_dir / "config.pbtxt").write_text(config_text)
        return model_dir

    return _make
