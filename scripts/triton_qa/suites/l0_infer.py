"""qa/L0_infer: infer_test.py against every ONNX, libtorch and python add/sub model, their ensembles, batch and
nobatch, on CPU (test.sh's TARGET=cpu with TRITON_SERVER_CPU_ONLY=1)."""

from __future__ import annotations

import shutil

from triton_qa import models
from triton_qa.core import GPU, OTHER, TENSORFLOW, TENSORRT, Config, LeftOut, Run, Suite, SuiteContext
from triton_qa.suites._common import BACKEND_DIR, fresh

SWAP_TYPES = ("float32", "int32", "int16", "int8")
SERVER_ARGS = [
    "--model-repository={models}",
    "--exit-timeout-secs=600",
    f"--backend-directory={BACKEND_DIR}",
    "--backend-config=tensorflow,version=2",
    "--backend-config=python,stub-timeout-seconds=120",
    f"--backend-config=python,shm-default-byte-size={1024 * 1024}",
]


def generate_model_repository(ctx: SuiteContext, backends: list[str], ensembles: bool, dirname: str) -> None:
    """generate_model_repository of test.sh, for TARGET=cpu."""
    dest = fresh(ctx.path(dirname))
    qa_models = ctx.data("qa_model_repository")
    for backend in backends:
        if backend in ("python", "python_dlpack"):
            for onnx_model in sorted(qa_models.glob("onnx_*")):
                name = onnx_model.name.replace("onnx", backend)
                swap = any(
                    name in (f"{backend}_{t}_{t}_{t}", f"{backend}_nobatch_{t}_{t}_{t}") for t in SWAP_TYPES
                )
                src = "sub_add" if swap else "add_sub"
                if backend == "python_dlpack":
                    src = "dlpack_" + src
                models.python_from_onnx(
                    onnx_model, dest, ctx.qa / "python_models" / src / "model.py", to=backend
                )
        else:
            models.copy_models(qa_models, dest, [f"{backend}*"])
    if ensembles:
        ens = ctx.data("qa_ensemble_model_repository/qa_model_repository")
        for backend in backends:
            if backend not in ("python", "python_dlpack", "openvino"):
                models.copy_models(ens, dest, [f"*{backend}*"])
        models.copy_models(ens, dest, ["nop_*"])
        models.nop_version_dirs(dest)
    for backend in backends:
        for model in dest.glob(f"{backend}*"):
            models.append(models.config(model), "instance_group [ { kind: KIND_CPU }]")
    # custom_zero_1_float32 and custom_nobatch_zero_1_float32 (identity backend) for the ensembles.
    zero = dest / "custom_zero_1_float32"
    shutil.copytree(ctx.qa / "custom_models" / "custom_zero_1_float32", zero)
    (zero / "1").mkdir(exist_ok=True)
    models.append(models.config(zero), "instance_group [ { kind: KIND_CPU }]")
    nobatch = dest / "custom_nobatch_zero_1_float32"
    shutil.copytree(zero, nobatch)
    models.sed(models.config(zero), r"max_batch_size: 1", "max_batch_size: 8")
    models.sed(models.config(zero), r"dims: \[ 1 \]", "dims: [ -1 ]")
    models.sed(models.config(nobatch), r"custom_zero_1_float32", "custom_nobatch_zero_1_float32")
    models.sed(models.config(nobatch), r"max_batch_size: 1", "max_batch_size: 0")
    models.sed(models.config(nobatch), r"dims: \[ 1 \]", "dims: [ -1, -1 ]")
    models.replace_test_backends(dest)


def _config(name: str, backends: list[str], ensembles: bool, env: dict[str, str]) -> Config:
    dirname = f"models_{name}"
    return Config(
        name=name,
        args=[a.format(models=dirname) for a in SERVER_ARGS],
        setup=lambda ctx: generate_model_repository(ctx, backends, ensembles, dirname),
        env={"BACKENDS": " ".join(backends), "ENSEMBLES": "1" if ensembles else "0", **env},
        steps=[Run("infer_test.py", timeout=1800)],
        start_timeout=600,
    )


def configs(ctx: SuiteContext) -> list[Config]:
    return [
        _config("cpu", ["onnx", "libtorch", "python"], True, {}),
        # test.sh with TEST_SYSTEM_SHARED_MEMORY=1 (Triton's L0_infer system shared memory job).
        _config("cpu-system-shm", ["onnx", "libtorch", "python"], True, {"TEST_SYSTEM_SHARED_MEMORY": "1"}),
        # BACKENDS with python_dlpack test only python_dlpack of the two python kinds: its own server.
        _config("cpu-python_dlpack", ["python_dlpack"], False, {}),
    ]


SUITE = Suite(
    name="L0_infer",
    configs=configs,
    left_out=[
        LeftOut("TARGET=gpu (KIND_GPU instances)", GPU),
        LeftOut("graphdef and savedmodel models and their ensembles", TENSORFLOW),
        LeftOut("plan models and their ensembles", TENSORRT),
        LeftOut("openvino models", OTHER, "not generated: gen_qa_models.py --openvino needs OpenVINO 2023.3"),
        LeftOut("TEST_CUDA_SHARED_MEMORY=1 job", GPU),
        LeftOut("TEST_VALGRIND=1 job", OTHER, "valgrind of tritonserver"),
        LeftOut(
            "graphdef-only ensembles (wrong_label_*, label_override_*, mix_*, batch_to_nobatch_*, ...)",
            TENSORFLOW,
            "test.sh copies them only when BACKENDS has graphdef",
        ),
    ],
    notes=[
        "The `identity` C++ backend of custom_zero_1_float32, custom_nobatch_zero_1_float32 and the nop_* "
        "ensemble steps is stood in for by a python model (scripts/triton_qa/stand_ins/identity).",
    ],
)
