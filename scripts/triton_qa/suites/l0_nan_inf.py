"""qa/L0_nan_inf: NaN and Inf outputs of a python model over HTTP (JSON and binary) and gRPC."""

from __future__ import annotations

from triton_qa.core import Config, Run, Suite, SuiteContext


def configs(ctx: SuiteContext) -> list[Config]:
    return [
        Config(name="default", args=[f"--model-repository={ctx.work}/models"], steps=[Run("nan_inf_test.py")])
    ]


SUITE = Suite(name="L0_nan_inf", configs=configs)
