"""qa/L0_optional_input: optional inputs of a model and of ensembles, one server per test as test.sh does."""

from __future__ import annotations

from triton_qa import models
from triton_qa.core import Config, Run, Suite, SuiteContext

TEST_CASES = [
    "test_all_inputs",
    "test_optional_same_input",
    "test_optional_mix_inputs",
    "test_optional_mix_inputs_2",
    "test_ensemble_all_inputs",
    "test_ensemble_optional_same_input",
    "test_ensemble_optional_mix_inputs",
    "test_ensemble_optional_mix_inputs_2",
    "test_ensemble_optional_pipeline",
    "test_ensemble_optional_connecting_tensor",
]


def setup(ctx: SuiteContext) -> None:
    repo = ctx.path("models")
    for m in (
        "identity_2_float32",
        "ensemble_identity_2_float32",
        "pipeline_identity_2_float32",
        "optional_connecting_tensor",
    ):
        (repo / m / "1").mkdir(parents=True, exist_ok=True)
    models.replace_test_backends(repo)


def configs(ctx: SuiteContext) -> list[Config]:
    return [
        Config(
            name=case,
            args=[f"--model-repository={ctx.work}/models", "--log-verbose=1"],
            setup=setup,
            steps=[Run("optional_input_test.py", [f"OptionalInputTest.{case}"])],
        )
        for case in TEST_CASES
    ]


SUITE = Suite(
    name="L0_optional_input",
    configs=configs,
    notes=["The `identity` C++ backend of identity_2_float32 is stood in for by a python model."],
)
