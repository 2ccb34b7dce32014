"""A model repository of ensembles for end-to-end tests: ONNX and python composing models, good and bad ensembles.

Written into a temporary directory by `build`; every config is Triton's format, unchanged.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from onnx import TensorProto, helper

from e2e.models import add_identity, save, write_config

PYTHON_MODELS = Path(__file__).parent / "python_models"

# Ensembles that must fail to load, and a piece of the reason each must give.
BROKEN = {
    "ens_bad_map": "is mapping to non-existing input NOPE in model scale2",
    "ens_bad_type": "inconsistent data type: TYPE_INT32 is inferred from model ens_bad_type while TYPE_FP32",
    "ens_missing": "no_such_model",
    # Triton's words, which its qa suite L0_model_config greps for.
    "ens_cycle_a": "circular dependency between ensembles: ens_cycle_a -> ... -> ens_cycle_b -> ens_cycle_a",
    "ens_old_version": "ensemble 'ens_old_version' depends on 'scale2' whose required version 7 is not loaded.",
    "ens_unconnected": (
        "output 'Y' for ensemble 'ens_unconnected' is not written: at least one of its depending tensors, "
        "'NEVER_WRITTEN', is not connected"
    ),
}

_FAIL_NEGATIVE = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Y = X, and an exception when X holds a negative number."""

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if (x < 0).any():
                raise pb_utils.TritonModelException("negative input")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return responses
'''


_OPTIONAL_PAIR = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUTPUT0 = INPUT0, OUTPUT1 = INPUT1, each only when its (optional) input came: Triton's L0_optional_input
    optional_identity, answering once per request."""

    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for i in ("0", "1"):
                tensor = pb_utils.get_input_tensor_by_name(request, "INPUT" + i)
                if tensor is not None:
                    outputs.append(pb_utils.Tensor("OUTPUT" + i, tensor.as_numpy()))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
'''
# Two optional FP32 [1] inputs, two outputs: the header of optional_pair and of the ensembles over it.
OPTIONAL_PAIR_TENSORS = """
max_batch_size: 4
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] optional: true },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 1 ] optional: true }
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def _optional_models(repo: Path) -> None:
    """Triton's L0_optional_input ensembles over a python model: optional_connecting_tensor (every tensor of the
    two steps connected, so a step's inputs come only as the request's do) and pipeline_identity_2_float32 (the
    second step's INPUT0 not connected at all)."""
    (repo / "optional_pair" / "1").mkdir(parents=True)
    (repo / "optional_pair" / "1" / "model.py").write_text(_OPTIONAL_PAIR)
    write_config(repo / "optional_pair", 'backend: "python"' + OPTIONAL_PAIR_TENSORS)
    both = {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}
    ensembles = {
        "ens_optional_connecting": [
            _step("optional_pair", both, {"OUTPUT0": "internal_output0", "OUTPUT1": "internal_output1"}),
            _step(
                "optional_pair",
                {"INPUT0": "internal_output0", "INPUT1": "internal_output1"},
                {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"},
            ),
        ],
        "ens_optional_pipeline": [
            _step("optional_pair", both, {"OUTPUT0": "internal_output"}),
            _step(
                "optional_pair", {"INPUT1": "internal_output"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}
            ),
        ],
    }
    for name, steps in ensembles.items():
        (repo / name / "1").mkdir(parents=True)
        write_config(
            repo / name,
            f'platform: "ensemble"{OPTIONAL_PAIR_TENSORS}ensemble_scheduling {{ step [ {", ".join(steps)} ] }}',
        )


def _add_sub_onnx(repo: Path) -> None:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1; FP32 [batch, 4]."""
    fp32 = TensorProto.FLOAT
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        "add_sub",
        [helper.make_tensor_value_info(n, fp32, ["batch", 4]) for n in ("INPUT0", "INPUT1")],
        [helper.make_tensor_value_info(n, fp32, ["batch", 4]) for n in ("OUTPUT0", "OUTPUT1")],
    )
    save(graph, repo / "add_sub_onnx" / "1" / "model.onnx")
    write_config(
        repo / "add_sub_onnx",
        """
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "diff_labels.txt" }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
""",
    )
    # An ensemble output coming from OUTPUT1 classifies with these labels.
    (repo / "add_sub_onnx" / "diff_labels.txt").write_text("first\nsecond\nthird\nfourth\n")


def _scale2(repo: Path) -> None:
    """Y = 2 * X; FP32 [batch, 4]."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["X", "TWO"], ["Y"])],
        "scale2",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 4])],
        initializer=[helper.make_tensor("TWO", TensorProto.FLOAT, [1], [2.0])],
    )
    save(graph, repo / "scale2" / "1" / "model.onnx")
    write_config(
        repo / "scale2",
        """
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
""",
    )


def _python_models(repo: Path) -> None:
    for name in ("add_sub", "repeat_decoupled"):
        shutil.copytree(PYTHON_MODELS / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "fail_negative" / "1").mkdir(parents=True)
    (repo / "fail_negative" / "1" / "model.py").write_text(_FAIL_NEGATIVE)
    write_config(
        repo / "fail_negative",
        """
backend: "python"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
""",
    )


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    maps = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += " " + " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: -1 {maps} }}'


def _ensemble(
    repo: Path,
    name: str,
    inputs: dict[str, tuple[str, str]],
    outputs: dict[str, tuple[str, str]],
    steps: list[str],
    *,
    max_batch_size: int = 8,
    extra: str = "",
) -> None:
    """`inputs`/`outputs`: tensor name -> (config data type, dims)."""
    tensors = {
        kind: ", ".join(f'{{ name: "{n}" data_type: {t} dims: {d} }}' for n, (t, d) in spec.items())
        for kind, spec in (("input", inputs), ("output", outputs))
    }
    (repo / name / "1").mkdir(parents=True)
    write_config(
        repo / name,
        f"""
name: "{name}"
platform: "ensemble"
max_batch_size: {max_batch_size}
input [ {tensors["input"]} ]
output [ {tensors["output"]} ]
ensemble_scheduling {{
  {extra}
  step [ {", ".join(steps)} ]
}}
""",
    )


FP4 = ("TYPE_FP32", "[ 4 ]")
AB = {"A": FP4, "B": FP4}
ADD_SUB_STEP = _step("add_sub_onnx", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "sum", "OUTPUT1": "DIFF"})
SCALE_STEP = _step("scale2", {"X": "sum"}, {"Y": "SUM2"})


def build(repo: Path) -> None:
    _add_sub_onnx(repo)
    _scale2(repo)
    _python_models(repo)
    _optional_models(repo)
    # Two ONNX steps in a chain: SUM2 = 2 * (A + B), DIFF = A - B. The steps are listed out of order on purpose.
    _ensemble(repo, "ens_chain", AB, {"SUM2": FP4, "DIFF": FP4}, [SCALE_STEP, ADD_SUB_STEP])
    _ensemble(
        repo,
        "ens_inflight",
        AB,
        {"SUM2": FP4, "DIFF": FP4},
        [ADD_SUB_STEP, SCALE_STEP],
        extra="max_inflight_requests: 1",
    )
    # Two independent steps, python and ONNX, on the same inputs.
    _ensemble(
        repo,
        "ens_parallel",
        AB,
        {"PY_SUM": FP4, "ONNX_DIFF": FP4},
        [
            _step("add_sub", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "PY_SUM"}),
            _step("add_sub_onnx", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT1": "ONNX_DIFF"}),
        ],
    )
    # An ensemble of an ensemble: 2 * (2 * (A + B)).
    _ensemble(
        repo,
        "ens_nested",
        AB,
        {"SUM4": FP4},
        [
            _step("ens_chain", {"A": "A", "B": "B"}, {"SUM2": "sum2"}),
            _step("scale2", {"X": "sum2"}, {"Y": "SUM4"}),
        ],
    )
    # A non-batching ensemble over batching models: the batch dimension of 1 is part of its shape.
    _ensemble(
        repo,
        "ens_nobatch",
        {"A": ("TYPE_FP32", "[ 1, 4 ]"), "B": ("TYPE_FP32", "[ 1, 4 ]")},
        {"DIFF": ("TYPE_FP32", "[ 1, 4 ]")},
        [_step("add_sub_onnx", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT1": "DIFF"})],
        max_batch_size=0,
    )
    # A python step that raises on negative numbers, after an ONNX step.
    _ensemble(
        repo,
        "ens_fail",
        AB,
        {"OUT": FP4},
        [
            _step("add_sub_onnx", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT1": "diff"}),
            _step("fail_negative", {"X": "diff"}, {"Y": "OUT"}),
        ],
    )
    # A decoupled step: one response per element of IN, each through an ONNX identity. Not marked decoupled:
    # the ensemble is decoupled because a step is, as Triton decides it.
    add_identity(repo, "int_identity", "INT32", max_batch_size=0, dims="[ 1 ]")
    _ensemble(
        repo,
        "ens_decoupled",
        {"IN": ("TYPE_INT32", "[ -1 ]"), "DELAY": ("TYPE_UINT32", "[ -1 ]")},
        {"OUT": ("TYPE_INT32", "[ 1 ]"), "IDX": ("TYPE_UINT32", "[ 1 ]")},
        [
            _step("repeat_decoupled", {"IN": "IN", "DELAY": "DELAY"}, {"OUT": "value", "IDX": "IDX"}),
            _step("int_identity", {"INPUT0": "value"}, {"OUTPUT0": "OUT"}),
        ],
        max_batch_size=0,
    )
    # Broken ones: each fails to load with its reason, and everything else serves.
    _ensemble(repo, "ens_bad_map", {"X": FP4}, {"Y": FP4}, [_step("scale2", {"NOPE": "X"}, {"Y": "Y"})])
    _ensemble(
        repo,
        "ens_bad_type",
        {"X": ("TYPE_INT32", "[ 4 ]")},
        {"Y": FP4},
        [_step("scale2", {"X": "X"}, {"Y": "Y"})],
    )
    _ensemble(repo, "ens_missing", {"X": FP4}, {"Y": FP4}, [_step("no_such_model", {"X": "X"}, {"Y": "Y"})])
    _ensemble(repo, "ens_cycle_a", {"X": FP4}, {"Y": FP4}, [_step("ens_cycle_b", {"X": "X"}, {"Y": "Y"})])
    _ensemble(repo, "ens_cycle_b", {"X": FP4}, {"Y": FP4}, [_step("ens_cycle_a", {"X": "X"}, {"Y": "Y"})])
    old_version = _step("scale2", {"X": "X"}, {"Y": "Y"}).replace("model_version: -1", "model_version: 7")
    _ensemble(repo, "ens_old_version", {"X": FP4}, {"Y": FP4}, [old_version])
    _ensemble(
        repo,
        "ens_unconnected",
        {"X": FP4},
        {"Y": FP4, "Z": FP4},
        [_step("scale2", {"X": "X"}, {"Y": "Z"}), _step("scale2", {"X": "NEVER_WRITTEN"}, {"Y": "Y"})],
    )


__all__ = ["BROKEN", "build"]
