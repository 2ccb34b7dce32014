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
    # test.sh's version: 0.4 and later fuzz every combination of mutations when fuzz() is given no max_depth,
    # which takes days; 0.3.0 fuzzes one primitive at a time, as Triton's CI did.
    pip=["boofuzz==0.3.0"],
    left_out=[
        LeftOut(
            "savedmodel_zero_1_object in the repository",
            TENSORFLOW,
            "replaced by onnx_zero_1_object: the fuzzed URLs name `simple`, which neither repository has",
        )
    ],
    notes=[
        "boofuzz 0.3.0, which test.sh pip-installs under Python 3.8, is installed into the runner's cache; the "
        "runner's sitecustomize restores the collections ABC aliases it imports, which Python 3.10 removed."
    ],
)
