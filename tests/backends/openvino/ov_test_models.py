"""Small OpenVINO models written at test time with openvino's opset API (and one ONNX file with `onnx.helper`)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import openvino as ov
import openvino.opset13 as ops
from onnx import TensorProto, helper

from modelhost.backends.openvino.instance import OpenVINOInstance

# The fixtures' types (conftest.py): make_model(name, model, config_text=None, filename="model.xml") -> model dir;
# load(model_dir, **load_model_config options) -> its first instance.
MakeModel = Callable[..., Path]
Load = Callable[..., OpenVINOInstance]


def save(model: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(model, str(path), compress_to_fp16=False)
    return path


def _named(node: Any, name: str) -> Any:
    node.output(0).get_tensor().set_names({name})
    return node


def mlp(dims: Sequence[int] = (8, 16, 3), batch: int = -1, seed: int = 0) -> Any:
    """INPUT0 [batch, dims[0]] -> OUTPUT0 [batch, dims[-1]]: dense layers with ReLU between them."""
    rng = np.random.default_rng(seed)
    x = ops.parameter(ov.PartialShape([batch, dims[0]]), ov.Type.f32, name="INPUT0")
    h: Any = x
    for i, (a, b) in enumerate(itertools.pairwise(dims)):
        h = ops.matmul(h, ops.constant(rng.standard_normal((a, b)).astype(np.float32) * 0.2), False, False)
        if i < len(dims) - 2:
            h = ops.relu(h)
    return ov.Model([_named(h, "OUTPUT0")], [x], "mlp")


def add_sub(element: Any = ov.Type.f32, shape: Sequence[int] = (-1, 4)) -> Any:
    """INPUT0, INPUT1 -> OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (Triton's "simple")."""
    a = ops.parameter(ov.PartialShape(list(shape)), element, name="INPUT0")
    b = ops.parameter(ov.PartialShape(list(shape)), element, name="INPUT1")
    return ov.Model(
        [_named(ops.add(a, b), "OUTPUT0"), _named(ops.subtract(a, b), "OUTPUT1")], [a, b], "add_sub"
    )


def identity(element: Any, shape: Sequence[int] = (-1, 3)) -> Any:
    """X -> Y, the same values (a Convert to the same type; a Reshape for strings, which Convert cannot take)."""
    x = ops.parameter(ov.PartialShape(list(shape)), element, name="X")
    if element == ov.Type.string:
        target = ops.constant(np.array([0] * len(shape), dtype=np.int64))
        y = ops.reshape(x, target, special_zero=True)
    else:
        y = ops.convert(x, element)
    return ov.Model([_named(y, "Y")], [x], "identity")


def fixed_inner_batch(batch: int = 4) -> Any:
    """X [batch, 6] -> Y [batch, 2, 3] through a Reshape with a constant target: the inputs take a dynamic batch
    dimension but the output keeps `batch`."""
    x = ops.parameter(ov.PartialShape([batch, 6]), ov.Type.f32, name="X")
    y = ops.reshape(x, ops.constant(np.array([batch, 2, 3], dtype=np.int64)), special_zero=False)
    return ov.Model([_named(ops.relu(y), "Y")], [x], "fixed_inner_batch")


def row_sum(batch: int = -1) -> Any:
    """X [batch, 4] -> SUM [batch]: one scalar per batch item."""
    x = ops.parameter(ov.PartialShape([batch, 4]), ov.Type.f32, name="X")
    y = ops.reduce_sum(x, ops.constant(np.array([1], dtype=np.int64)), keep_dims=False)
    return ov.Model([_named(y, "SUM")], [x], "row_sum")


def with_layout(layout: str, shape: Sequence[int] = (1, 4)) -> Any:
    """A ReLU whose input and output carry `layout` (as a model converted with layouts, or given them by ppp)."""
    x = ops.parameter(ov.PartialShape(list(shape)), ov.Type.f32, name="X")
    model = ov.Model([_named(ops.relu(x), "Y")], [x], "with_layout")
    ov.layout_helpers.set_layout(model.input(0), ov.Layout(layout))
    ov.layout_helpers.set_layout(model.output(0), ov.Layout(layout))
    return model


def write_onnx_add(path: Path, dims: Sequence[int | str] = ("batch", 4)) -> Path:
    """An ONNX model (opset 17): A, B -> C = A + B."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["A", "B"], ["C"])],
        "add",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(dims)) for n in ("A", "B")],
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, list(dims))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def reference(model: Any, inputs: dict[str, np.ndarray], **properties: str) -> list[np.ndarray]:
    """OpenVINO's own in-process answer, compiled with `properties`."""
    compiled = ov.Core().compile_model(model, "CPU", properties)
    results = compiled(inputs)
    return [np.array(results[port]) for port in compiled.outputs]
