"""Tiny ONNX models and config.pbtxt files for end-to-end tests, generated into a temporary repository."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import tritonclient.http as httpclient
from onnx import TensorProto, helper

import modelhost

ONNX_TYPES = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BYTES": TensorProto.STRING,
}
CONFIG_TYPES = {k: ("TYPE_STRING" if k == "BYTES" else f"TYPE_{k}") for k in ONNX_TYPES}


def save(graph: onnx.GraphProto, path: Path) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def identity_graph(
    datatype: str, shape: list[int | str], in_name: str = "INPUT0", out_name: str = "OUTPUT0"
) -> onnx.GraphProto:
    t = ONNX_TYPES[datatype]
    return helper.make_graph(
        [helper.make_node("Identity", [in_name], [out_name])],
        "identity",
        [helper.make_tensor_value_info(in_name, t, shape)],
        [helper.make_tensor_value_info(out_name, t, shape)],
    )


def write_config(model_dir: Path, text: str) -> None:
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(text)


def add_identity(
    repo: Path,
    name: str,
    datatype: str,
    *,
    max_batch_size: int = 8,
    dims: str = "[ -1 ]",
    versions: tuple[int, ...] = (1,),
    extra: str = "",
    label_file: str = "",
) -> Path:
    model_dir = repo / name
    rank = dims.count(",") + 1
    shape: list[int | str] = (["batch"] if max_batch_size > 0 else []) + [f"d{i}" for i in range(rank)]
    for v in versions:
        save(identity_graph(datatype, shape), model_dir / str(v) / "model.onnx")
    label = f'\n    label_filename: "{label_file}"' if label_file else ""
    write_config(
        model_dir,
        f"""
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: {CONFIG_TYPES[datatype]} dims: {dims} }} ]
output [ {{ name: "OUTPUT0" data_type: {CONFIG_TYPES[datatype]} dims: {dims}{label} }} ]
{extra}
""",
    )
    return model_dir


def add_versioned_add(repo: Path, name: str, versions: tuple[int, ...], policy: str) -> None:
    """OUTPUT0 = INPUT0 + version, so a test can tell which version answered."""
    model_dir = repo / name
    for v in versions:
        graph = helper.make_graph(
            [helper.make_node("Add", ["INPUT0", "K"], ["OUTPUT0"])],
            "add_version",
            [helper.make_tensor_value_info("INPUT0", TensorProto.INT32, ["batch", 4])],
            [helper.make_tensor_value_info("OUTPUT0", TensorProto.INT32, ["batch", 4])],
            initializer=[helper.make_tensor("K", TensorProto.INT32, [1], [v])],
        )
        save(graph, model_dir / str(v) / "model.onnx")
    write_config(
        model_dir,
        f"""
platform: "onnxruntime_onnx"
max_batch_size: 8
version_policy: {policy}
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] }} ]
""",
    )


def add_reshape(repo: Path, name: str = "reshape_fp32") -> None:
    """Wire shape [B, 4]; the model itself sees [B, 2, 2] and answers [B, 2, 2], reported as [B, 4]."""
    save(identity_graph("FP32", ["batch", 2, 2]), repo / name / "1" / "model.onnx")
    write_config(
        repo / name,
        """
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]
""",
    )


def add_nobatch(repo: Path, name: str = "nobatch_int32") -> None:
    """max_batch_size 0: the request shape is the full shape, [2, 3] here."""
    save(identity_graph("INT32", [2, 3]), repo / name / "1" / "model.onnx")
    write_config(
        repo / name,
        """
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 2, 3 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2, 3 ] } ]
""",
    )


def copy_examples(repo: Path, *names: str) -> None:
    examples = Path(modelhost.__file__).parent / "examples"
    for name in names:
        shutil.copytree(examples / name, repo / name)


def add_slow(repo: Path, name: str = "slow") -> None:
    """Runs ITERS rounds of a 256x256 matrix product: a request whose duration the test chooses."""
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["y_in", "y_in"], ["prod"]),
            helper.make_node("Tanh", ["prod"], ["y_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("y_in", TensorProto.FLOAT, [256, 256]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("y_out", TensorProto.FLOAT, [256, 256]),
        ],
    )
    graph = helper.make_graph(
        [
            helper.make_node(
                "Constant", [], ["cond"], value=helper.make_tensor("c", TensorProto.BOOL, [], [True])
            ),
            helper.make_node("Squeeze", ["ITERS"], ["trip"]),
            helper.make_node("Loop", ["trip", "cond", "X"], ["Y"], body=body),
        ],
        "slow",
        [
            helper.make_tensor_value_info("ITERS", TensorProto.INT64, [1]),
            helper.make_tensor_value_info("X", TensorProto.FLOAT, [256, 256]),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [256, 256])],
    )
    save(graph, repo / name / "1" / "model.onnx")
    write_config(
        repo / name,
        """
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "ITERS" data_type: TYPE_INT64 dims: [ 1 ] }, { name: "X" data_type: TYPE_FP32 dims: [ 256, 256 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 256, 256 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
""",
    )


def slow_inputs(iterations: int) -> list[httpclient.InferInput]:
    """Inputs of the `add_slow` model: `iterations` rounds (about a millisecond each on this machine)."""
    iters = httpclient.InferInput("ITERS", [1], "INT64")
    iters.set_data_from_numpy(np.array([iterations], dtype=np.int64))
    x = httpclient.InferInput("X", [256, 256], "FP32")
    x.set_data_from_numpy(np.full((256, 256), 0.001, dtype=np.float32))
    return [iters, x]
