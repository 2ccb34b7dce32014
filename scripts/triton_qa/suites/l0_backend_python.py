"""qa/L0_backend_python, its bls, io, lifecycle and decoupled subtests (each runs in its own folder, as
`(cd SUBTEST && bash test.sh)` does): BLS from python models, tensors in and out (DLPack, ensembles, requested
outputs), errors and lifecycle of the stub processes, decoupled models."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from triton_qa import models
from triton_qa.core import GPU, OTHER, STAND_INS, Check, Config, LeftOut, Run, Server, Suite, SuiteContext
from triton_qa.suites import _http
from triton_qa.suites._common import BACKEND_DIR, fresh

PYTHON_BACKEND_TAG = "r24.09"  # PYTHON_BACKEND_REPO_TAG of Triton 2.51
BLS_MODELS = [
    "bls",
    "dlpack_add_sub",
    "bls_async",
    "bls_memory",
    "bls_memory_async",
    "add_sub",
    "execute_error",
    "identity_fp32",
    "dlpack_identity",
    "dlpack_square",
    "identity_fp32_timeout",
]
NEEDS_GPU_IO = "needs a GPU: the DLPack models move tensors to CUDA (torch .cuda())"
BLS_ERROR = "BLS is only supported during the 'execute' function."


def python_backend_examples(ctx: SuiteContext) -> Path | None:
    """python_backend at the tag test.sh clones (for examples/decoupled/square_model.py), kept in the cache; None
    where it cannot be cloned (tried once a run)."""
    dest = ctx.cache / f"python_backend-{PYTHON_BACKEND_TAG}"
    failed = ctx.logs / ".python_backend_clone_failed"
    if failed.exists():
        return None
    if not (dest / "examples" / "decoupled" / "square_model.py").exists():
        if dest.exists():
            shutil.rmtree(dest)
        url = "https://github.com/triton-inference-server/python_backend"
        proc = subprocess.run(
            ["git", "clone", "--depth", "1", "--branch", PYTHON_BACKEND_TAG, url, str(dest)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            ctx.log(
                f"  git clone {url} failed ({proc.stderr.strip()[-200:]}): using the stand-in square_int32"
            )
            failed.parent.mkdir(parents=True, exist_ok=True)
            failed.write_text(proc.stderr)
            return None
    return dest / "examples"


def _copy_python_model(ctx: SuiteContext, repo: Path, name: str, target: str | None = None) -> Path:
    """mkdir -p models/NAME/1 && cp ../../python_models/NAME/{model.py,config.pbtxt}."""
    src = ctx.qa / "python_models" / name
    dest = repo / (target or name)
    (dest / "1").mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "model.py", dest / "1" / "model.py")
    if (src / "config.pbtxt").exists():
        shutil.copy(src / "config.pbtxt", dest / "config.pbtxt")
    return dest


def _square(ctx: SuiteContext, repo: Path) -> None:
    """square_int32: python_backend's example where it can be cloned, else the runner's stand-in."""
    examples = python_backend_examples(ctx)
    if examples is not None:
        model, config = (
            examples / "decoupled" / "square_model.py",
            examples / "decoupled" / "square_config.pbtxt",
        )
    else:
        model, config = STAND_INS / "square" / "model.py", STAND_INS / "square" / "config.pbtxt"
    (repo / "square_int32" / "1").mkdir(parents=True, exist_ok=True)
    shutil.copy(model, repo / "square_int32" / "1" / "model.py")
    shutil.copy(config, repo / "square_int32" / "config.pbtxt")


# --- bls -------------------------------------------------------------------------------------------------


def setup_bls(ctx: SuiteContext) -> None:
    repo = fresh(ctx.path("bls/models"))
    for name in BLS_MODELS:
        _copy_python_model(ctx, repo, name)
    shutil.copytree(
        ctx.data("qa_sequence_implicit_model_repository") / "onnx_nobatch_sequence_int32",
        repo / "onnx_nobatch_sequence_int32",
    )
    _square(ctx, repo)
    src = ctx.data("qa_model_repository") / "libtorch_nobatch_float32_float32_float32"
    for kind in ("gpu", "cpu"):
        dest = repo / f"libtorch_{kind}"
        shutil.copytree(src, dest)
        models.sed(models.config(dest), "libtorch_nobatch_float32_float32_float32", f"libtorch_{kind}")
        models.append(models.config(dest), f"instance_group [ {{ kind: KIND_{kind.upper()}}} ]")


def setup_bls_single(name: str, extra_onnx: bool = False):  # type: ignore[no-untyped-def]
    def setup(ctx: SuiteContext) -> None:
        repo = fresh(ctx.path("bls/models"))
        _copy_python_model(ctx, repo, name)
        if extra_onnx:
            shutil.copytree(
                ctx.data("qa_model_repository") / "onnx_int32_int32_int32", repo / "onnx_int32_int32_int32"
            )
            shutil.rmtree(repo / "onnx_int32_int32_int32" / "1")

    return setup


def setup_bls_warmup(ctx: SuiteContext) -> None:
    setup_bls_single("bls_model_loading", extra_onnx=True)(ctx)
    inputs = "".join(
        f'    inputs {{\n        key: "{n}"\n        value: {{\n            data_type: TYPE_FP32\n'
        "            dims: 4\n            zero_data: false\n        }\n    }\n"
        for n in ("INPUT0", "INPUT1")
    )
    models.append(
        models.config(ctx.path("bls/models/bls_model_loading")),
        f'model_warmup [{{\n    name : "regular sample"\n    batch_size: 1\n{inputs}}}]',
    )


def setup_bls_params(ctx: SuiteContext) -> None:
    _copy_python_model(ctx, fresh(ctx.path("bls/params_models")), "bls_parameters")


def _log_has(text: str, minimum: int = 1, exact: int | None = None):  # type: ignore[no-untyped-def]
    def check(ctx: SuiteContext, server: Server | None) -> str | None:
        log = ctx.server_log.read_text(errors="replace") if ctx.server_log and ctx.server_log.exists() else ""
        n = log.count(text)
        if exact is not None and n != exact:
            return f"the server log has {n} lines with {text!r}; test.sh expects {exact}"
        if exact is None and n < minimum:
            return f"the server log has no {text!r} (test.sh greps for it)"
        return None

    return check


def _load_model(name: str):  # type: ignore[no-untyped-def]
    def check(ctx: SuiteContext, server: Server | None) -> str | None:
        # test.sh's curl has no time limit: the model runs its unit tests in initialize (3 x a 30 s sleep).
        code, body = _http.request("POST", f"/v2/repository/models/{name}/load", timeout=600)
        return None if code == 200 else f"loading {name} answered {code}: {body[:300]}"

    return check


# --- io --------------------------------------------------------------------------------------------------


def setup_io_trial(trial: str):  # type: ignore[no-untyped-def]
    def setup(ctx: SuiteContext) -> None:
        repo = fresh(ctx.path("io/models"))
        src = "dlpack_io_identity" if trial == "default" else "dlpack_io_identity_decoupled"
        for i in (1, 2, 3):
            model = _copy_python_model(ctx, repo, src, f"dlpack_io_identity_{i}")
            models.sed(models.config(model), r"^name:.*", f'name: "dlpack_io_identity_{i}"')
        (repo / "ensemble_io" / "1").mkdir(parents=True)
        shutil.copy(
            ctx.qa / "python_models" / "ensemble_io" / "config.pbtxt", repo / "ensemble_io" / "config.pbtxt"
        )

    return setup


def setup_io_models(*names: str):  # type: ignore[no-untyped-def]
    def setup(ctx: SuiteContext) -> None:
        repo = fresh(ctx.path("io/models"))
        for name in names:
            _copy_python_model(ctx, repo, name)

    return setup


# --- lifecycle --------------------------------------------------------------------------------------------


def setup_lifecycle(ctx: SuiteContext) -> None:
    repo = fresh(ctx.path("lifecycle/models"))
    for name in ("error_code", "execute_cancel", "execute_return_error"):
        _copy_python_model(ctx, repo, name)
    for name, delay in (("execute_error", 12000000), ("execute_grpc_error", 1200000)):
        cfg = models.config(_copy_python_model(ctx, repo, name))
        models.sed(cfg, r"^name:.*", f'name: "{name}"')
        models.sed(cfg, r"^max_batch_size:.*", "max_batch_size: 8")
        models.append(
            cfg, f"dynamic_batching {{ preferred_batch_size: [8], max_queue_delay_microseconds: {delay} }}"
        )
    cfg = models.config(_copy_python_model(ctx, repo, "wrong_model"))
    models.sed(cfg, r"^name:.*", 'name: "wrong_model"')
    models.sed(cfg, "TYPE_FP32", "TYPE_UINT32")


def setup_lifecycle_single(name: str):  # type: ignore[no-untyped-def]
    def setup(ctx: SuiteContext) -> None:
        _copy_python_model(ctx, fresh(ctx.path("lifecycle/models")), name)

    return setup


# --- decoupled ----------------------------------------------------------------------------------------------


def setup_decoupled(ctx: SuiteContext) -> None:
    repo = ctx.path("decoupled/models")
    _copy_python_model(ctx, repo, "identity_fp32")
    cfg = models.config(_copy_python_model(ctx, repo, "execute_cancel"))
    models.append(cfg, "model_transaction_policy { decoupled: True }")
    _square(ctx, repo)
    _copy_python_model(ctx, repo, "dlpack_add_sub")


def configs(ctx: SuiteContext) -> list[Config]:
    def args(sub: str, repo: str = "models", *extra: str) -> list[str]:
        return [
            f"--model-repository={ctx.work}/{sub}/{repo}",
            f"--backend-directory={BACKEND_DIR}",
            "--log-verbose=1",
            *extra,
        ]

    out: list[Config] = []
    # bls
    for pool_mb in (64, 256):
        for trial in ("non_decoupled", "decoupled"):
            steps: list[Run | Check] = [
                Run("../test_infer_shm_leak.py", pytest=True, cwd="bls", env={"MODEL_NAME": m}, timeout=300)
                for m in ("bls", "bls_memory", "bls_memory_async", "bls_async")
            ]
            out.append(
                Config(
                    name=f"bls-{trial}-pool{pool_mb}MB",
                    args=args("bls", "models", f"--cuda-memory-pool-byte-size=0:{pool_mb * 1024 * 1024}"),
                    setup=setup_bls,
                    env={"BLS_KIND": trial},
                    server_log=f"bls/bls_{trial}.{pool_mb}.inference_server.log",
                    server_cwd="bls",
                    steps=steps,
                    after=[
                        Check("log_has_request_timeout_11000000000", _log_has("Request timeout: 11000000000"))
                    ],
                    suspect={
                        "log_has_request_timeout_11000000000": "test.sh greps for a debug line of Triton's "
                        "python backend",
                        "test_shm_leak": "the BLS models' own unittests include GPU ones (test_gpu_bls, "
                        "test_bls_tensor_lifecycle, torch.cuda): they fail without a GPU whatever the server",
                    },
                    full_only=pool_mb == 256,
                )
            )
    out.append(
        Config(
            name="bls_init_error",
            args=args("bls"),
            setup=setup_bls_single("bls_init_error"),
            start="fail",
            steps=[],
            after=[Check("log_has_bls_error", _log_has(BLS_ERROR))],
            start_timeout=90,
        )
    )
    out.append(
        Config(
            name="bls_finalize_error",
            args=args("bls"),
            setup=setup_bls_single("bls_finalize_error"),
            steps=[],
            after=[Check("log_has_bls_error", _log_has(BLS_ERROR))],
        )
    )
    for warmup in (False, True):
        out.append(
            Config(
                name=f"bls_model_loading{'-warmup' if warmup else ''}",
                args=args("bls", "models", "--model-control-mode=explicit"),
                server_cwd="bls",  # the model opens models/onnx_int32_int32_int32/3/model.onnx from there
                setup=setup_bls_warmup if warmup else setup_bls_single("bls_model_loading", extra_onnx=True),
                steps=[
                    Check("load_bls_model_loading", _load_model("bls_model_loading")),
                    *(
                        []
                        if warmup
                        else [
                            Run(
                                "../test_infer_shm_leak.py",
                                pytest=True,
                                cwd="bls",
                                env={"MODEL_NAME": "bls_model_loading"},
                            )
                        ]
                    ),
                ],
            )
        )
    out.append(
        Config(
            name="bls_parameters",
            args=args("bls", "params_models"),
            setup=setup_bls_params,
            steps=[Run("bls_parameters_test.py", cwd="bls")],
        )
    )
    # io
    for trial in ("default", "decoupled"):
        out.append(
            Config(
                name=f"io-ensemble-{trial}",
                args=args("io"),
                setup=setup_io_trial(trial),
                env={"TRIAL": trial},
                server_log="io/io_server.log",
                steps=[
                    Run(
                        "io_test.py",
                        ["IOTest::test_ensemble_io"],
                        pytest=True,
                        cwd="io",
                        timeout=300,
                        skip={"test_ensemble_io": NEEDS_GPU_IO},
                    )
                ],
            )
        )
    for model, test in (
        ("dlpack_empty_output", "test_empty_gpu_output"),
        ("variable_gpu_output", "test_variable_gpu_output"),
    ):
        out.append(
            Config(
                name=f"io-{test}",
                args=args("io"),
                setup=setup_io_models(model),
                server_log="io/io_server.log",
                steps=[
                    Run(
                        "io_test.py",
                        [f"IOTest::{test}"],
                        pytest=True,
                        cwd="io",
                        timeout=300,
                        skip={test: NEEDS_GPU_IO},
                    )
                ],
            )
        )
    out.append(
        Config(
            name="io-requested_output",
            args=args("io"),
            setup=setup_io_models("add_sub", "dlpack_io_identity_decoupled"),
            server_log="io/io_server.log",
            steps=[
                # test_requested_output_decoupled is left out (see the suite's left_out): a GPU test.
                Run(
                    "io_test.py",
                    ["IOTest::test_requested_output_default"],
                    pytest=True,
                    cwd="io",
                    timeout=300,
                ),
            ],
        )
    )
    # lifecycle
    out.append(
        Config(
            name="lifecycle",
            args=args("lifecycle"),
            setup=setup_lifecycle,
            server_log="lifecycle/lifecycle_server.log",
            steps=[Run("lifecycle_test.py", pytest=True, cwd="lifecycle", timeout=600)],
        )
    )
    out.append(
        Config(
            name="lifecycle-init_error",
            args=args("lifecycle"),
            setup=setup_lifecycle_single("init_error"),
            server_log="lifecycle/lifecycle_server.log",
            start="fail",
            steps=[],
            after=[Check("log_has_init_error", _log_has("name 'lorem_ipsum' is not defined"))],
            start_timeout=90,
        )
    )
    out.append(
        Config(
            name="lifecycle-fini_error",
            args=args("lifecycle"),
            setup=setup_lifecycle_single("fini_error"),
            server_log="lifecycle/lifecycle_server.log",
            steps=[],
            after=[Check("log_has_fini_error", _log_has("name 'undefined_variable' is not defined"))],
        )
    )
    out.append(
        Config(
            name="lifecycle-auto_complete_error",
            args=args("lifecycle", "models", "--strict-model-config=false"),
            setup=setup_lifecycle_single("auto_complete_error"),
            server_log="lifecycle/lifecycle_server.log",
            start="fail",
            steps=[],
            after=[
                Check("log_has_auto_complete_error", _log_has("name 'undefined_variable' is not defined"))
            ],
            start_timeout=90,
        )
    )
    # decoupled
    out.append(
        Config(
            name="decoupled",
            args=args("decoupled"),
            setup=setup_decoupled,
            server_log="decoupled/decoupled_server.log",
            steps=[
                Run(
                    "decoupled_test.py",
                    pytest=True,
                    cwd="decoupled",
                    timeout=600,
                    skip={
                        "test_decoupled_bls": "needs a GPU: decoupled_bls moves its inputs to CUDA (torch)"
                    },
                )
            ],
            after=[
                Check(f"log_has_{re.sub(r'[^a-z]+', '_', msg.lower()).strip('_')}", _log_has(msg))
                for msg in ("Specific Msg!", "Info Msg!", "Warning Msg!", "Error Msg!")
            ]
            + [
                Check("log_has_3_finalize_invoked", _log_has("Finalize invoked", exact=3)),
                Check("log_has_3_finalize_complete", _log_has("Finalize complete...", exact=3)),
            ],
        )
    )
    return out


SUITE = Suite(
    name="L0_backend_python",
    configs=configs,
    left_out=[
        LeftOut(
            "io_test.py test_requested_output_decoupled",
            GPU,
            "dlpack_io_identity_decoupled moves its output to CUDA when the random GPU_OUTPUT[0] is true; on a "
            "CPU its response thread dies and the stream never ends (tritonserver's too)",
        ),
        LeftOut(
            "python_test.py and the other subtests (ensemble, response_sender, variants, env, examples, ...)",
            OTHER,
            "the brief covers the bls, io, lifecycle and decoupled parts",
        ),
        LeftOut(
            "the /dev/shm page counts before and after the server (test.sh's get_shm_pages)",
            OTHER,
            "meaningless on a machine shared with other work",
        ),
        LeftOut(
            "lifecycle_test.py's four repeats (test.sh runs it five times against one server)",
            OTHER,
            "runtime",
        ),
        LeftOut(
            "GPU tensors (libtorch_gpu's KIND_GPU is KIND_CPU here; the tests skip GPU parts with "
            "TRITON_SERVER_CPU_ONLY)",
            GPU,
        ),
    ],
    notes=[
        f"square_int32 comes from python_backend's examples/decoupled at {PYTHON_BACKEND_TAG}, cloned into the "
        "cache as test.sh clones it; where GitHub cannot be reached, from the runner's stand-in of it "
        "(scripts/triton_qa/stand_ins/square).",
        "triton_shm_monitor (a C extension of Triton's QA image, for shm_util.ShmLeakDetector) is a stand-in: the "
        "leak probe watches Triton's python backend regions, which modelhost does not create.",
        "torch is the environment's (test.sh installs torch 1.13 cu117).",
    ],
)
