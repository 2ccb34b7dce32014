"""qa/L0_implicit_state: implicit.py's tests on the ONNX and libtorch implicit-state sequence models (requesting
a state as an output: refused, or allowed where the config lists it)."""

from __future__ import annotations

import shutil

from triton_qa import models
from triton_qa.core import CPP_BACKEND, OTHER, TENSORRT, Config, LeftOut, Run, Suite, SuiteContext
from triton_qa.suites._common import BACKEND_DIR, fresh

BACKENDS = ["libtorch", "onnx"]
CPP_MODELS = [
    "no_implicit_state",
    "no_state_update",
    "wrong_internal_state",
    "single_state_buffer",
    "growable_memory",
]
TESTS = ["ImplicitStateTest.test_request_output_not_allowed", "ImplicitStateTest.test_request_output"]
NOT_YET = "--cuda-virtual-address-size: not yet (compatibility.md, Memory and devices)"


def setup(ctx: SuiteContext) -> None:
    repo = ctx.path("models_qa")
    fresh(repo)
    data = ctx.data("qa_sequence_implicit_model_repository")
    for backend in BACKENDS:
        name = f"{backend}_nobatch_sequence_int32"
        shutil.copytree(data / name, repo / name)
        allow = repo / f"{name}_output"
        shutil.copytree(data / name, allow)
        models.sed(models.config(allow), r"^name:.*", f'name: "{name}_output"')
        state = "OUTPUT_STATE__1" if backend == "libtorch" else "OUTPUT_STATE"
        models.append(
            models.config(allow), f'output [{{ name: "{state}" \n data_type: TYPE_INT32 \n dims: [ 1 ] }}]'
        )


def configs(ctx: SuiteContext) -> list[Config]:
    env = {
        "ENSEMBLES": "0",
        "BACKENDS": " ".join(BACKENDS),
        "IMPLICIT_STATE": "1",
        "INITIAL_STATE_ZERO": "0",
        "INITIAL_STATE_FILE": "0",
        "SINGLE_STATE_BUFFER": "0",
    }
    base = [f"--backend-directory={BACKEND_DIR}", f"--model-repository={ctx.work}/models_qa"]
    return [
        Config(
            name="as-test.sh",
            args=[*base, f"--cuda-virtual-address-size=0:{4 * 1024 * 1024}"],
            setup=setup,
            env=env,
            steps=[Run("implicit_state.py", TESTS)],
            unsupported=NOT_YET,
        ),
        Config(
            name="without-cuda-virtual-address-size",
            args=base,
            setup=setup,
            env=env,
            steps=[Run("implicit_state.py", TESTS)],
        ),
    ]


SUITE = Suite(
    name="L0_implicit_state",
    configs=configs,
    left_out=[
        LeftOut(
            f"the tests of the C++ `implicit_state` backend's models ({', '.join(CPP_MODELS)}): "
            "test_no_implicit_state, test_wrong_implicit_state_name, test_implicit_state_single_buffer, "
            "test_implicit_state_growable_memory, test_no_update",
            CPP_BACKEND,
        ),
        LeftOut("plan implicit-state models", TENSORRT),
        LeftOut(
            "L0_sequence_batcher run again with IMPLICIT_STATE=1 (test.sh's last step)", OTHER, "runtime"
        ),
    ],
    notes=[
        "The models are in a folder of their own (models_qa): the suite's `models` holds the C++ backend's.",
        "The second configuration drops --cuda-virtual-address-size (it sizes GPU growable memory, used only by "
        "growable_memory) so that the tests run on modelhost.",
    ],
)
