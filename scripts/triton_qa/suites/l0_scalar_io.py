"""qa/L0_scalar_io: scalar (shape []) inputs and outputs of ONNX models, and a scalar model with a non-scalar
config refused at load."""

from __future__ import annotations

from triton_qa import models
from triton_qa.core import Config, Run, Suite, SuiteContext
from triton_qa.suites._common import fresh


def setup(ctx: SuiteContext) -> None:
    models.copy_models(ctx.data("qa_scalar_models"), fresh(ctx.path("models")))


def break_scalar(ctx: SuiteContext) -> None:
    setup(ctx)
    models.sed(models.config(ctx.path("models/onnx_scalar_1dim")), r"dims.*", "dims:[2]")


def configs(ctx: SuiteContext) -> list[Config]:
    args = [f"--model-repository={ctx.work}/models"]
    return [
        Config(
            name="default", args=args, setup=setup, env={"BACKENDS": "onnx"}, steps=[Run("scalar_test.py")]
        ),
        # test.sh: onnx_scalar_1dim with dims [2] must fail to load, and the server with it.
        Config(
            name="bad-scalar-dims", args=args, setup=break_scalar, start="fail", steps=[], start_timeout=60
        ),
    ]


SUITE = Suite(name="L0_scalar_io", configs=configs)
