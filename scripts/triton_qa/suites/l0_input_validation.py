"""qa/L0_input_validation: required and optional inputs of python models (InputValTest), and input shapes
checked against the configuration (InputShapeTest) on a TorchScript identity and a string add/sub model."""

from __future__ import annotations

import shutil
import subprocess

from triton_qa import models
from triton_qa.core import CPP_CLIENT, TENSORRT, Config, LeftOut, Run, Suite, SuiteContext

PT_CONFIG = """name: "pt_identity"
backend: "pytorch"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_FP32
    dims: [8]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_FP32
    dims: [8]
  }
]
dynamic_batching {
    max_queue_delay_microseconds: 1000000
}
"""


def setup_shape(ctx: SuiteContext) -> None:
    pt = ctx.path("models/pt_identity")
    (pt / "1").mkdir(parents=True, exist_ok=True)
    code = f"import torch\ntorch.jit.save(torch.jit.script(torch.nn.Identity()), {str(pt / '1' / 'model.pt')!r})\n"
    subprocess.run([ctx.python, "-c", code], check=True, capture_output=True, timeout=300)
    models.config(pt).write_text(PT_CONFIG)
    # graphdef_object_int32_int32 (TensorFlow) stood in for by the ONNX model of the same types.
    dest = ctx.path("models/graphdef_object_int32_int32")
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(ctx.data("qa_model_repository") / "onnx_object_int32_int32", dest)
    models.sed(models.config(dest), "onnx_object_int32_int32", "graphdef_object_int32_int32")


def configs(ctx: SuiteContext) -> list[Config]:
    repo = f"--model-repository={ctx.work}/models"
    return [
        Config(
            name="InputValTest",
            args=[repo],
            steps=[Run("input_validation_test.py", ["InputValTest"], pytest=True)],
        ),
        Config(
            name="InputShapeTest",
            args=[repo],
            setup=setup_shape,
            steps=[
                Run(
                    "input_validation_test.py",
                    ["InputShapeTest"],
                    pytest=True,
                    skip={"test_wrong_input_shape_tensor_size": "needs TensorRT (plan shape-tensor models)"},
                )
            ],
        ),
    ]


SUITE = Suite(
    name="L0_input_validation",
    configs=configs,
    pip=["pytest-asyncio"],
    left_out=[
        LeftOut("test_wrong_input_shape_tensor_size (plan_*_zero_1_float32_int32 shape tensors)", TENSORRT),
        LeftOut("input_byte_size_test (C++, in-process API)", CPP_CLIENT),
    ],
    notes=[
        "graphdef_object_int32_int32 (TensorFlow) is stood in for by qa_model_repository's onnx_object_int32_int32 "
        "under that name: the test checks the server's validation of string inputs, not the framework.",
        "pytest-asyncio, which test.sh pip-installs, is installed into the runner's cache.",
    ],
)
