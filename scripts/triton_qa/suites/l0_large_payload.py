"""qa/L0_large_payload: 1.9 GB tensors over HTTP and gRPC through identity models, and 3 GB over HTTP refused,
then a small request still served; one server per model kind."""

from __future__ import annotations

import re
import shutil

from triton_qa import models
from triton_qa.core import TENSORFLOW, TENSORRT, Config, LeftOut, Run, Suite, SuiteContext
from triton_qa.suites._common import fresh

SUFFIX = "nobatch_zero_1_float32"


def setup_for(target: str):  # type: ignore[no-untyped-def]
    def setup(ctx: SuiteContext) -> None:
        repo = fresh(ctx.path("models"))
        if target == "python":
            model = repo / f"python_{SUFFIX}"
            (model / "1").mkdir(parents=True)
            src = ctx.qa / "python_models" / "identity_fp32"
            text = (src / "config.pbtxt").read_text()
            text = text.replace("max_batch_size: 64", "max_batch_size: 0")
            text = re.sub(r'name: "identity_fp32"', f'name: "python_{SUFFIX}"', text)
            models.config(model).write_text(text)
            shutil.copy(src / "model.py", model / "1" / "model.py")
        else:
            shutil.copytree(
                ctx.data("qa_identity_model_repository") / f"{target}_{SUFFIX}", repo / f"{target}_{SUFFIX}"
            )

    return setup


def configs(ctx: SuiteContext) -> list[Config]:
    return [
        Config(
            name=target,
            args=[f"--model-repository={ctx.work}/models", "--log-verbose=1"],
            setup=setup_for(target),
            steps=[Run("large_payload_test.py", [f"LargePayLoadTest.test_{target}"], timeout=1200)],
        )
        for target in ("onnx", "libtorch", "python")
    ]


SUITE = Suite(
    name="L0_large_payload",
    configs=configs,
    left_out=[LeftOut("graphdef and savedmodel", TENSORFLOW), LeftOut("plan", TENSORRT)],
)
