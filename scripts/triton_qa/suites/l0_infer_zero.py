"""qa/L0_infer_zero: infer_zero_test.py on the identity models with zero-sized dimensions and their
ensembles."""

from __future__ import annotations

import shutil

from triton_qa import models
from triton_qa.core import GPU, OTHER, TENSORFLOW, TENSORRT, Config, LeftOut, Run, Suite, SuiteContext
from triton_qa.suites._common import fresh


def setup(ctx: SuiteContext) -> None:
    dest = fresh(ctx.path("models"))
    models.copy_models(ctx.data("qa_identity_model_repository"), dest)
    models.copy_models(ctx.data("qa_ensemble_model_repository/qa_identity_model_repository"), dest)
    for p in dest.glob("plan_compatible*"):
        shutil.rmtree(p)
    models.nop_version_dirs(dest)
    models.replace_test_backends(dest)


def configs(ctx: SuiteContext) -> list[Config]:
    return [
        Config(
            name="default",
            args=["--model-repository=models"],
            setup=setup,
            env={"BACKENDS": "onnx libtorch"},
            steps=[Run("infer_zero_test.py")],
        ),
    ]


SUITE = Suite(
    name="L0_infer_zero",
    configs=configs,
    left_out=[
        LeftOut("graphdef and savedmodel identity models", TENSORFLOW),
        LeftOut("plan identity models", TENSORRT),
        LeftOut("TEST_CUDA_SHARED_MEMORY=1 job", GPU),
        LeftOut(
            "TEST_SYSTEM_SHARED_MEMORY=1",
            OTHER,
            "zero-byte regions cannot be created (not run by Triton either)",
        ),
    ],
    notes=["The `identity` C++ backend of the nop_* ensemble steps is stood in for by a python model."],
)
