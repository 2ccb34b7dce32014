"""Small TensorFlow models for the tensorflow backend's tests, written at test time: SavedModels from a
`tf.Module` with `tf.function` serving signatures, and GraphDefs from `tf.compat.v1` graphs."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's C++ INFO lines out of test output
tf: Any = pytest.importorskip("tensorflow")

WEIGHTS = np.array([[1.0], [2.0], [3.0]], dtype=np.float32)

Builder = Callable[[Path], None]


def spec(shape: list[int | None] | None, dtype: Any, name: str) -> Any:
    return tf.TensorSpec(shape, dtype, name=name)


def function(body: Callable[..., dict[str, Any]], *specs: Any) -> Any:
    return tf.function(body, input_signature=list(specs), autograph=False)


def matmul(path: Path) -> None:
    """y = x @ WEIGHTS (a variable), t = s + s: FP32 [-1, 3] and BYTES [-1], batching."""
    module = tf.Module()
    module.w = tf.Variable(WEIGHTS)
    module.serve = function(
        lambda x, s: {"y": tf.matmul(x, module.w), "t": tf.strings.join([s, s])},
        spec([None, 3], tf.float32, "x"),
        spec([None], tf.string, "s"),
    )
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})


def matmul_expected(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    return np.asarray(x @ WEIGHTS, dtype=np.float32)


def _save_functions(path: Path, functions: dict[str, Any]) -> None:
    module = tf.Module()
    for index, signature in enumerate(functions.values()):
        setattr(module, f"signature_{index}", signature)
    tf.saved_model.save(module, str(path), signatures=functions)


def fixed_rows(path: Path) -> None:
    """No batching: INT32 [2, -1] doubled (a variable dimension, a fixed first one)."""
    _save_functions(
        path, {"serving_default": function(lambda a: {"doubled": a * 2}, spec([2, None], tf.int32, "a"))}
    )


def two_signatures(path: Path) -> None:
    """serving_default: row sums; "scale": x * 10. Both FP32 [-1, 2]."""
    total = function(
        lambda x: {"sum": tf.reduce_sum(x, axis=1, keepdims=True)}, spec([None, 2], tf.float32, "x")
    )
    scale = function(lambda x: {"scaled": x * 10.0}, spec([None, 2], tf.float32, "x"))
    _save_functions(path, {"serving_default": total, "scale": scale})


def one_signature(key: str) -> Builder:
    """One signature, not named serving_default: identity FP32 [-1, 2]."""

    def build(path: Path) -> None:
        _save_functions(
            path, {key: function(lambda x: {"same": tf.identity(x)}, spec([None, 2], tf.float32, "x"))}
        )

    build.__name__ = f"one_signature_{key}"  # the test fixtures cache built models by builder name
    return build


def scalar(path: Path) -> None:
    """A rank-0 input and output."""
    _save_functions(path, {"serving_default": function(lambda x: {"y": x + 1.0}, spec([], tf.float32, "x"))})


def unknown_rank(path: Path) -> None:
    _save_functions(
        path, {"serving_default": function(lambda x: {"y": tf.identity(x)}, spec(None, tf.float32, "x"))}
    )


def grid(path: Path) -> None:
    """FP32 [-1, 2, 2] flattened to [-1, 4] and its element count [-1] (INT64): for a config reshape."""
    flatten = function(
        lambda x: {
            "flat": tf.reshape(x, [-1, 4]),
            "count": tf.fill([tf.shape(x)[0]], tf.constant(4, tf.int64)),
        },
        spec([None, 2, 2], tf.float32, "x"),
    )
    _save_functions(path, {"serving_default": flatten})


def triples(path: Path) -> None:
    """FP32 [-1] reshaped to [-1, 3] inside the graph: a request whose size is no multiple of 3 fails in TF."""
    _save_functions(
        path,
        {
            "serving_default": function(
                lambda x: {"rows": tf.reshape(x, [-1, 3])}, spec([None], tf.float32, "x")
            )
        },
    )


def bfloat16(path: Path) -> None:
    _save_functions(
        path,
        {"serving_default": function(lambda x: {"y": tf.identity(x)}, spec([None, 2], tf.bfloat16, "x"))},
    )


def retag(path: Path, tags: list[str]) -> None:
    """Give the SavedModel's MetaGraph other tags (tf.saved_model.save always writes "serve")."""
    proto = path / "saved_model.pb"
    saved_model = importlib.import_module("tensorflow.core.protobuf.saved_model_pb2").SavedModel()
    saved_model.ParseFromString(proto.read_bytes())
    del saved_model.meta_graphs[0].meta_info_def.tags[:]
    saved_model.meta_graphs[0].meta_info_def.tags.extend(tags)
    proto.write_bytes(saved_model.SerializeToString())


def tagged(tags: list[str]) -> Builder:
    def build(path: Path) -> None:
        matmul(path)
        retag(path, tags)

    build.__name__ = "tagged_" + "_".join(tags)
    return build


def graphdef(path: Path, *, variables: bool = False) -> None:
    """A TF1 graph: OUTPUT = INPUT (FP32 [-1, 3]) @ WEIGHTS, T = S + S (BYTES [-1]). With `variables`, WEIGHTS is a
    variable that the graph's "init" op initialises (a GraphDef that is not frozen)."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="INPUT")
        s = tf.compat.v1.placeholder(tf.string, [None], name="S")
        w = tf.compat.v1.Variable(WEIGHTS, name="w") if variables else tf.constant(WEIGHTS, name="w")
        tf.identity(tf.matmul(x, w), name="OUTPUT")
        tf.identity(tf.strings.join([s, s]), name="T")
        if variables:
            tf.compat.v1.variables_initializer(tf.compat.v1.global_variables(), name="init")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(graph.as_graph_def().SerializeToString())


def tf1_savedmodel(path: Path) -> None:
    """A SavedModel written by TensorFlow 1's builder, its signature keys no Python identifiers ("in", "out-put"):
    y = x @ WEIGHTS from a variable, FP32 [-1, 3] -> [-1, 1]."""
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="INPUT")
        y = tf.matmul(x, tf.compat.v1.Variable(WEIGHTS, name="w"), name="OUTPUT")
        session.run(tf.compat.v1.global_variables_initializer())
        builder = tf.compat.v1.saved_model.Builder(str(path))
        signature = tf.compat.v1.saved_model.predict_signature_def({"in": x}, {"out-put": y})
        builder.add_meta_graph_and_variables(
            session, ["serve"], signature_def_map={"serving_default": signature}
        )
        builder.save()


def write_model(repo: Path, name: str, build: Builder, config: str | None = None, filename: str = "") -> Path:
    """repo/name/1/<filename> built by `build` (default model.savedmodel), and config.pbtxt when given."""
    model_dir = repo / name
    version_dir = model_dir / "1"
    version_dir.mkdir(parents=True, exist_ok=True)
    build(version_dir / (filename or "model.savedmodel"))
    if config is not None:
        (model_dir / "config.pbtxt").write_text(config)
    return model_dir


def parameters(**values: str) -> str:
    return "\n".join(
        f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}' for key, value in values.items()
    )


__all__ = [
    "WEIGHTS",
    "Builder",
    "bfloat16",
    "fixed_rows",
    "function",
    "graphdef",
    "grid",
    "matmul",
    "matmul_expected",
    "one_signature",
    "parameters",
    "retag",
    "scalar",
    "tagged",
    "tf",
    "tf1_savedmodel",
    "triples",
    "two_signatures",
    "unknown_rank",
    "write_model",
]
