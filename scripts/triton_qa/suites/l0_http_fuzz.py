"""qa/L0_http_fuzz: boofuzz's HTTP request-line fuzzing of 20 endpoints (fuzztest.py); no step may fail."""

from __future__ import annotations

import shutil

from triton_qa.core import TENSORFLOW, Config, LeftOut, Run, Suite, SuiteContext
from triton_qa.suites._common import fresh


def setup(ctx: SuiteContext) -> None:
    repo = fresh(ctx.path("models"))
    shutil.copytree(
        ctx.data("qa_identity_model_repository") / "onnx_zero_1_object", repo / "onnx_zero_1_object"
    )


def configs(ctx: SuiteContext) -> list[Config]:
    return [
        Config(
            name="fuzz",
            args=[f"--model-repository={ctx.work}/models"],
            setup=setup,
            steps=[Run("fuzztest.py", args=["-v"], timeout=3600)],
        )
    ]


SUITE = Suite(
    name="L0_http_fuzz",
    configs=configs,
    pip=["boofuzz"],
    left_out=[
        LeftOut(
            "savedmodel_zero_1_object in the repository",
            TENSORFLOW,
            "replaced by onnx_zero_1_object: the fuzzed URLs name `simple`, which neither repository has",
        )
    ],
    notes=[
        "boofuzz, which test.sh pip-installs (0.3.0 under Python 3.8), is installed at its latest version into "
        "the runner's cache for this Python."
    ],
)
