#!/usr/bin/env python3
"""Generate the example model repository shipped in ``src/modelhost/examples/``.

The output is deterministic: the same graphs, the same weights (fixed numpy seed) and therefore the
same ``model.onnx`` bytes on every run.  Models are written with opset 17 and IR version 8 so that any
onnxruntime >= 1.14 loads them.

Usage::

    python scripts/make_examples.py               # (re)generate src/modelhost/examples/
    python scripts/make_examples.py --check       # regenerate, then verify every model in onnxruntime
    python scripts/make_examples.py --check-only  # verify the files already on disk
    python scripts/make_examples.py --out DIR     # write somewhere else

Models:

* ``simple``         INT32 INPUT0/INPUT1 [16] -> OUTPUT0 = sum, OUTPUT1 = difference (Triton's classic)
* ``simple_string``  the same with BYTES tensors holding decimal integers
* ``identity_fp32``  FP32 identity with a dynamic second dimension and *no* config.pbtxt (auto-complete)
* ``mlp``            FP32 MLP 256 -> 1024 -> 1024 -> 10 with ReLU, ~5 MB of weights
* ``tiny_mlp_pytorch``   FP32 MLP 16 -> 32 -> 4 as TorchScript (the PyTorch backend)
* ``tiny_mlp_openvino``  the same weights as OpenVINO IR (the OpenVINO backend)
* ``trees_fil``          an XGBoost binary classifier, 8 features, 20 trees (the FIL backend)

The last three need the backends' frameworks to regenerate (``pip install -e '.[torch,openvino,fil]'``); the
TorchScript, IR and XGBoost files are deterministic for a given framework version.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
SEED = 20240601
PRODUCER = "modelhost-make-examples"

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "src" / "modelhost" / "examples"

MLP_SIZES = (256, 1024, 1024, 10)
TINY_MLP_SIZES = (16, 32, 4)
TREES_FEATURES = 8


# ----------------------------------------------------------------------------------------------------------
# ONNX graphs
# ----------------------------------------------------------------------------------------------------------


def _finish(graph: onnx.GraphProto, doc: str) -> onnx.ModelProto:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name=PRODUCER,
        producer_version="1",
        doc_string=doc,
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def make_simple() -> onnx.ModelProto:
    shape: list[str | int] = ["batch", 16]
    inputs = [
        helper.make_tensor_value_info("INPUT0", TensorProto.INT32, shape),
        helper.make_tensor_value_info("INPUT1", TensorProto.INT32, shape),
    ]
    outputs = [
        helper.make_tensor_value_info("OUTPUT0", TensorProto.INT32, shape),
        helper.make_tensor_value_info("OUTPUT1", TensorProto.INT32, shape),
    ]
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub"),
    ]
    graph = helper.make_graph(nodes, "simple", inputs, outputs)
    return _finish(graph, "OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (int32)")


def make_simple_string() -> onnx.ModelProto:
    shape: list[str | int] = ["batch", 16]
    inputs = [
        helper.make_tensor_value_info("INPUT0", TensorProto.STRING, shape),
        helper.make_tensor_value_info("INPUT1", TensorProto.STRING, shape),
    ]
    outputs = [
        helper.make_tensor_value_info("OUTPUT0", TensorProto.STRING, shape),
        helper.make_tensor_value_info("OUTPUT1", TensorProto.STRING, shape),
    ]
    nodes = [
        helper.make_node("Cast", ["INPUT0"], ["in0_i32"], to=TensorProto.INT32, name="parse0"),
        helper.make_node("Cast", ["INPUT1"], ["in1_i32"], to=TensorProto.INT32, name="parse1"),
        helper.make_node("Add", ["in0_i32", "in1_i32"], ["sum_i32"], name="add"),
        helper.make_node("Sub", ["in0_i32", "in1_i32"], ["diff_i32"], name="sub"),
        helper.make_node("Cast", ["sum_i32"], ["OUTPUT0"], to=TensorProto.STRING, name="format0"),
        helper.make_node("Cast", ["diff_i32"], ["OUTPUT1"], to=TensorProto.STRING, name="format1"),
    ]
    graph = helper.make_graph(nodes, "simple_string", inputs, outputs)
    return _finish(graph, "simple on decimal-integer strings: parse, add/subtract, format")


def make_identity_fp32() -> onnx.ModelProto:
    shape: list[str | int | None] = ["batch", "n"]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"], name="identity")],
        "identity_fp32",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, shape)],
    )
    return _finish(graph, "FP32 identity, [batch, -1]; shipped without config.pbtxt")


def mlp_weights(sizes: tuple[int, ...] = MLP_SIZES) -> list[tuple[np.ndarray, np.ndarray]]:
    """The MLP's (weight [in, out], bias [out]) pairs, He-initialised from a fixed seed."""
    rng = np.random.default_rng(SEED)
    layers = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        w = (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        b = (rng.standard_normal(fan_out) * 0.01).astype(np.float32)
        layers.append((w, b))
    return layers


def make_mlp(sizes: tuple[int, ...] = MLP_SIZES) -> onnx.ModelProto:
    initializers = []
    nodes = []
    current = "INPUT0"
    layers = mlp_weights(sizes)
    for i, (w, b) in enumerate(layers):
        initializers.append(numpy_helper.from_array(w, name=f"fc{i}.weight"))
        initializers.append(numpy_helper.from_array(b, name=f"fc{i}.bias"))
        last = i == len(layers) - 1
        out = "OUTPUT0" if last else f"fc{i}"
        # Gemm: Y = A @ B + C, bias broadcast over the batch.
        gemm_inputs = [current, f"fc{i}.weight", f"fc{i}.bias"]
        nodes.append(helper.make_node("Gemm", gemm_inputs, [out], name=f"fc{i}"))
        if not last:
            nodes.append(helper.make_node("Relu", [out], [f"relu{i}"], name=f"relu{i}"))
            current = f"relu{i}"
        else:
            current = out
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", sizes[0]])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", sizes[-1]])],
        initializer=initializers,
    )
    layers_text = [str(sizes[0]), *(f"{n} (ReLU)" for n in sizes[1:-1]), str(sizes[-1])]
    return _finish(graph, "FP32 MLP " + " -> ".join(layers_text))


def torchscript_mlp(sizes: tuple[int, ...] = MLP_SIZES) -> bytes:
    """The MLP of `mlp_weights(sizes)` as a TorchScript file (the PyTorch backend's model.pt)."""
    import io

    import torch

    layers = []
    for i, (w, b) in enumerate(mlp_weights(sizes)):
        linear = torch.nn.Linear(w.shape[0], w.shape[1])
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(w.T.copy()))
            linear.bias.copy_(torch.from_numpy(b))
        layers.append(linear)
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    module = torch.jit.script(torch.nn.Sequential(*layers).eval())
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    return buffer.getvalue()


def openvino_mlp(sizes: tuple[int, ...] = MLP_SIZES) -> tuple[bytes, bytes]:
    """The MLP of `mlp_weights(sizes)` as OpenVINO IR (model.xml, model.bin), converted from the ONNX graph."""
    import tempfile

    import openvino as ov

    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = Path(tmp) / "model.onnx"
        onnx.save(make_mlp(sizes), str(onnx_path))
        model = ov.convert_model(str(onnx_path))
        ov.save_model(model, str(Path(tmp) / "model.xml"), compress_to_fp16=False)
        return (Path(tmp) / "model.xml").read_bytes(), (Path(tmp) / "model.bin").read_bytes()


def trees_data(rows: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """A synthetic binary classification set: the label depends on a few of the features, with noise."""
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((rows, TREES_FEATURES)).astype(np.float32)
    score = x[:, 0] + 0.5 * x[:, 1] * x[:, 2] - 0.75 * np.abs(x[:, 3]) + 0.3 * rng.standard_normal(rows)
    return x, (score > 0).astype(np.float32)


def xgboost_trees() -> bytes:
    """An XGBoost binary classifier (20 trees of depth 3) in XGBoost's JSON format (FIL's xgboost_json)."""
    import xgboost as xgb

    x, y = trees_data()
    params = {"objective": "binary:logistic", "max_depth": 3, "eta": 0.3, "nthread": 1, "seed": 0}
    booster = xgb.train(params, xgb.DMatrix(x, label=y), num_boost_round=20)
    return bytes(booster.save_raw(raw_format="json"))


# ----------------------------------------------------------------------------------------------------------
# config.pbtxt
# ----------------------------------------------------------------------------------------------------------


def _tensor_block(kind: str, tensors: list[tuple[str, str, list[int]]]) -> str:
    entries = []
    for name, dtype, dims in tensors:
        dims_s = ", ".join(str(d) for d in dims)
        entries.append(f'  {{\n    name: "{name}"\n    data_type: {dtype}\n    dims: [ {dims_s} ]\n  }}')
    return f"{kind} [\n" + ",\n".join(entries) + "\n]\n"


def make_config(
    name: str,
    max_batch_size: int,
    inputs: list[tuple[str, str, list[int]]],
    outputs: list[tuple[str, str, list[int]]],
    extra: str = "",
    platform: str = "onnxruntime_onnx",
) -> str:
    text = f'name: "{name}"\nplatform: "{platform}"\nmax_batch_size: {max_batch_size}\n'
    text += _tensor_block("input", inputs)
    text += _tensor_block("output", outputs)
    if extra:
        text += extra
    return text


def simple_config(name: str, dtype: str) -> str:
    return make_config(
        name,
        8,
        [("INPUT0", dtype, [16]), ("INPUT1", dtype, [16])],
        [("OUTPUT0", dtype, [16]), ("OUTPUT1", dtype, [16])],
    )


def tiny_mlp_pytorch_config() -> str:
    # Triton's PyTorch naming: <name>__<index> binds the config's tensors to forward()'s arguments by position.
    text = make_config(
        "tiny_mlp_pytorch",
        64,
        [("INPUT__0", "TYPE_FP32", [TINY_MLP_SIZES[0]])],
        [("OUTPUT__0", "TYPE_FP32", [TINY_MLP_SIZES[-1]])],
        platform="pytorch_libtorch",
    )
    return text + "dynamic_batching { }\n"


def tiny_mlp_openvino_config() -> str:
    text = make_config(
        "tiny_mlp_openvino",
        64,
        [("INPUT0", "TYPE_FP32", [TINY_MLP_SIZES[0]])],
        [("OUTPUT0", "TYPE_FP32", [TINY_MLP_SIZES[-1]])],
    )
    text = text.replace('platform: "onnxruntime_onnx"', 'backend: "openvino"')
    return text + "dynamic_batching { }\n"


def trees_fil_config() -> str:
    text = make_config(
        "trees_fil",
        1024,
        [("input__0", "TYPE_FP32", [TREES_FEATURES])],
        [("output__0", "TYPE_FP32", [2])],
    )
    text = text.replace('platform: "onnxruntime_onnx"', 'backend: "fil"')
    parameters = "".join(
        f'parameters {{\n  key: "{key}"\n  value: {{ string_value: "{value}" }}\n}}\n'
        for key, value in (
            ("model_type", "xgboost_json"),
            ("is_classifier", "true"),
            ("predict_proba", "true"),
        )
    )
    return text + "dynamic_batching { }\n" + parameters


def mlp_config() -> str:
    return make_config(
        "mlp",
        64,
        [("INPUT0", "TYPE_FP32", [MLP_SIZES[0]])],
        [("OUTPUT0", "TYPE_FP32", [MLP_SIZES[-1]])],
        extra="instance_group [\n  {\n    count: 1\n    kind: KIND_CPU\n  }\n]\n",
    )


README = """\
# Example model repository

A Triton-layout model repository bundled with modelhost, generated by `scripts/make_examples.py`
(do not edit the model files by hand; change the script and re-run it). Most models are ONNX graphs
(opset 17, IR version 8) served by the `onnxruntime_onnx` platform; `tiny_mlp_pytorch`, `tiny_mlp_openvino`
and `trees_fil` show the PyTorch, OpenVINO and FIL backends (their frameworks come with
`pip install 'modelhost[torch,openvino,fil]'`, which `scripts/serve.sh` installs). The server only looks at
directories, so this README is ignored.

Serve it with:

    modelhost serve --model-repository src/modelhost/examples

## `simple`

Triton's classic `simple` example (works with the stock tritonclient `simple_*` samples).

- inputs `INPUT0`, `INPUT1`: TYPE_INT32, dims [16]; `max_batch_size: 8`
- outputs `OUTPUT0` = INPUT0 + INPUT1, `OUTPUT1` = INPUT0 - INPUT1: TYPE_INT32 [16]

## `simple_string`

As `simple`, but every tensor is TYPE_STRING (BYTES) holding decimal integers:
`["1", "2", ...] + ["3", "4", ...]` gives `OUTPUT0 = ["4", "6", ...]`, `OUTPUT1 = ["-2", "-2", ...]`.
The graph is Cast(string -> int32) on each input, Add / Sub, Cast(int32 -> string).
`max_batch_size: 8`.

## `identity_fp32`

FP32 Identity, ONNX input `INPUT0` shape `[batch, n]` (both dynamic), output `OUTPUT0` the same.
It ships **without** `config.pbtxt`: it demonstrates auto-complete of the model configuration
from the model file (inputs, outputs, data types, dims `[-1]` and batching).

## `mlp`

FP32 MLP 256 -> 1024 (ReLU) -> 1024 (ReLU) -> 10 (three Gemm nodes), ~5 MB of float32 weights
(He-initialised from a fixed seed).

- input `INPUT0`: TYPE_FP32 [256]; output `OUTPUT0`: TYPE_FP32 [10]
- `max_batch_size: 64`, `instance_group [{ count: 1, kind: KIND_CPU }]`, no dynamic batching (yet)
- the model used by the load benchmark in `benchmarks/`

## `tiny_mlp_pytorch`, `tiny_mlp_openvino`

One small FP32 MLP 16 -> 32 (ReLU) -> 4 (same seed as `mlp`), served by two more backends:

- `tiny_mlp_pytorch`: TorchScript `model.pt`, `platform: "pytorch_libtorch"`; input `INPUT__0` [16], output
  `OUTPUT__0` [4] (Triton's `<name>__<index>` naming binds them to `forward()`'s arguments by position)
- `tiny_mlp_openvino`: OpenVINO IR `model.xml` + `model.bin`, `backend: "openvino"`; `INPUT0` [16] -> `OUTPUT0` [4]
- both `max_batch_size: 64` with dynamic batching; the same input gives the same answer from both (to FP32
  rounding)

## `trees_fil`

An XGBoost binary classifier (20 trees of depth 3 on 8 synthetic features) in XGBoost's JSON format, served by
the FIL backend (`backend: "fil"`, `model_type: "xgboost_json"`, `is_classifier`, `predict_proba`): input
`input__0` TYPE_FP32 [8], output `output__0` TYPE_FP32 [2], the probabilities of class 0 and class 1.

## `simple_ensemble`

An ensemble (`platform: "ensemble"`) of two `simple` steps: the first gives `sum` = INPUT0 + INPUT1 and
`diff` = INPUT0 - INPUT1, the second adds and subtracts those, so `OUTPUT0` = 2 * INPUT0 and
`OUTPUT1` = 2 * INPUT1. TYPE_INT32 [16], `max_batch_size: 8`. Its version directory holds only a placeholder
file (an ensemble has no model file); see `docs/ensembles.md`.

All ONNX inputs have a dynamic first dimension named `batch`, which is the Triton batch dimension
(the `dims` in `config.pbtxt` exclude it).
"""


# ----------------------------------------------------------------------------------------------------------
# Writing and checking
# ----------------------------------------------------------------------------------------------------------


ENSEMBLE_CONFIG = """\
name: "simple_ensemble"
platform: "ensemble"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
ensemble_scheduling {
  step [
    {
      model_name: "simple"
      model_version: -1
      input_map { key: "INPUT0" value: "INPUT0" }
      input_map { key: "INPUT1" value: "INPUT1" }
      output_map { key: "OUTPUT0" value: "sum" }
      output_map { key: "OUTPUT1" value: "diff" }
    },
    {
      model_name: "simple"
      model_version: -1
      input_map { key: "INPUT0" value: "sum" }
      input_map { key: "INPUT1" value: "diff" }
      output_map { key: "OUTPUT0" value: "OUTPUT0" }
      output_map { key: "OUTPUT1" value: "OUTPUT1" }
    }
  ]
}
"""


def build() -> dict[str, bytes]:
    """Return {relative path: file contents} for the whole repository."""
    files: dict[str, bytes] = {
        "README.md": README.encode(),
        "simple/config.pbtxt": simple_config("simple", "TYPE_INT32").encode(),
        "simple/1/model.onnx": make_simple().SerializeToString(),
        "simple_string/config.pbtxt": simple_config("simple_string", "TYPE_STRING").encode(),
        "simple_string/1/model.onnx": make_simple_string().SerializeToString(),
        "identity_fp32/1/model.onnx": make_identity_fp32().SerializeToString(),
        "mlp/config.pbtxt": mlp_config().encode(),
        "mlp/1/model.onnx": make_mlp().SerializeToString(),
        "simple_ensemble/config.pbtxt": ENSEMBLE_CONFIG.encode(),
        "tiny_mlp_pytorch/config.pbtxt": tiny_mlp_pytorch_config().encode(),
        "tiny_mlp_pytorch/1/model.pt": torchscript_mlp(TINY_MLP_SIZES),
        "tiny_mlp_openvino/config.pbtxt": tiny_mlp_openvino_config().encode(),
        "trees_fil/config.pbtxt": trees_fil_config().encode(),
        "trees_fil/1/xgboost.json": xgboost_trees(),
        # git keeps no empty directory, and the version directory must exist.
        "simple_ensemble/1/.keep": b"",
    }
    xml, weights = openvino_mlp(TINY_MLP_SIZES)
    files["tiny_mlp_openvino/1/model.xml"] = xml
    files["tiny_mlp_openvino/1/model.bin"] = weights
    return files


def write(out: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.read_bytes() == data:
            continue
        path.write_bytes(data)
    # identity_fp32 must not have a config (it demonstrates auto-complete).
    stray = out / "identity_fp32" / "config.pbtxt"
    if stray.exists():
        stray.unlink()


def check(out: Path) -> None:
    import onnxruntime as ort

    def session(name: str) -> ort.InferenceSession:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        path = str(out / name / "1" / "model.onnx")
        return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])

    rng = np.random.default_rng(0)

    # simple
    a = rng.integers(-1000, 1000, size=(3, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, size=(3, 16), dtype=np.int32)
    o0, o1 = session("simple").run(["OUTPUT0", "OUTPUT1"], {"INPUT0": a, "INPUT1": b})
    assert o0.dtype == np.int32 and o1.dtype == np.int32
    np.testing.assert_array_equal(o0, a + b)
    np.testing.assert_array_equal(o1, a - b)
    assert (out / "simple" / "config.pbtxt").is_file()

    # simple_string
    sess = session("simple_string")
    # ["1", "2", ...] + ["3", "4", ...] -> ["4", "6", ...] (rows padded to the declared width of 16).
    x = np.array([["1", "2"] + ["0"] * 14], dtype=object)
    y = np.array([["3", "4"] + ["10"] * 14], dtype=object)
    t0, t1 = sess.run(["OUTPUT0", "OUTPUT1"], {"INPUT0": x, "INPUT1": y})
    assert t0.tolist() == [["4", "6"] + ["10"] * 14], t0
    assert t1.tolist() == [["-2", "-2"] + ["-10"] * 14], t1
    x16 = np.array([[str(v) for v in row] for row in a], dtype=object)
    y16 = np.array([[str(v) for v in row] for row in b], dtype=object)
    s0, s1 = sess.run(["OUTPUT0", "OUTPUT1"], {"INPUT0": x16, "INPUT1": y16})
    assert s0.tolist() == [[str(v) for v in row] for row in (a + b)]
    assert s1.tolist() == [[str(v) for v in row] for row in (a - b)]
    assert (out / "simple_string" / "config.pbtxt").is_file()

    # identity_fp32
    sess = session("identity_fp32")
    for shape in [(1, 1), (2, 7), (4, 300)]:
        v = rng.standard_normal(shape).astype(np.float32)
        (r,) = sess.run(["OUTPUT0"], {"INPUT0": v})
        assert r.dtype == np.float32
        np.testing.assert_array_equal(r, v)
    assert not (out / "identity_fp32" / "config.pbtxt").exists()
    inp = sess.get_inputs()[0]
    assert inp.name == "INPUT0" and inp.type == "tensor(float)" and len(inp.shape) == 2

    # mlp
    sess = session("mlp")
    v = rng.standard_normal((5, MLP_SIZES[0])).astype(np.float32)
    (r,) = sess.run(["OUTPUT0"], {"INPUT0": v})
    expected = v.astype(np.float64)
    layers = mlp_weights()
    for i, (w, bias) in enumerate(layers):
        expected = expected @ w.astype(np.float64) + bias
        if i < len(layers) - 1:
            expected = np.maximum(expected, 0.0)
    assert r.shape == (5, MLP_SIZES[-1]) and r.dtype == np.float32
    np.testing.assert_allclose(r, expected, rtol=1e-4, atol=1e-4)
    size = (out / "mlp" / "1" / "model.onnx").stat().st_size
    assert 4_000_000 < size < 7_000_000, size
    assert "max_batch_size: 64" in (out / "mlp" / "config.pbtxt").read_text()

    for rel in ("simple", "simple_string", "identity_fp32", "mlp"):
        m = onnx.load(str(out / rel / "1" / "model.onnx"))
        assert m.ir_version == IR_VERSION and m.opset_import[0].version == OPSET
    check_other_backends(out, rng)
    print(f"check ok: {out}")


def tiny_mlp_reference(v: np.ndarray) -> np.ndarray:
    expected = v.astype(np.float64)
    layers = mlp_weights(TINY_MLP_SIZES)
    for i, (w, bias) in enumerate(layers):
        expected = expected @ w.astype(np.float64) + bias
        if i < len(layers) - 1:
            expected = np.maximum(expected, 0.0)
    return expected


def check_other_backends(out: Path, rng: np.random.Generator) -> None:
    import openvino as ov
    import torch
    import xgboost as xgb

    v = rng.standard_normal((5, TINY_MLP_SIZES[0])).astype(np.float32)
    module = torch.jit.load(str(out / "tiny_mlp_pytorch" / "1" / "model.pt"))
    with torch.inference_mode():
        r = module(torch.from_numpy(v)).numpy()
    np.testing.assert_allclose(r, tiny_mlp_reference(v), rtol=1e-4, atol=1e-4)
    # FP32, as the backend runs it unless HINT_BF16 asks (OpenVINO's own default is BF16 on CPUs that have it).
    compiled = ov.Core().compile_model(
        str(out / "tiny_mlp_openvino" / "1" / "model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
    )
    r = compiled(v)[compiled.output(0)]
    np.testing.assert_allclose(r, tiny_mlp_reference(v), rtol=1e-4, atol=1e-4)
    booster = xgb.Booster(model_file=str(out / "trees_fil" / "1" / "xgboost.json"))
    x, y = trees_data()
    accuracy = float(((booster.inplace_predict(x) > 0.5) == y).mean())
    assert accuracy > 0.85, accuracy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="repository directory to write")
    parser.add_argument("--check", action="store_true", help="verify the models in onnxruntime after writing")
    parser.add_argument("--check-only", action="store_true", help="verify the existing files, write nothing")
    args = parser.parse_args(argv)
    if not args.check_only:
        files = build()
        write(args.out, files)
        total = sum(len(d) for d in files.values())
        print(f"wrote {len(files)} files ({total / 1e6:.1f} MB) to {args.out}")
    if args.check or args.check_only:
        check(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
