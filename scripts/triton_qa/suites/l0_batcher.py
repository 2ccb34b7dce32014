"""qa/L0_batcher: the dynamic batcher (batcher_test.py, a server per test as test.sh does) on ONNX, libtorch and
python float32 add/sub models, fixed and variable shapes, ragged batches, preferred sizes, queue delays, preserve
ordering (checked on the trace files with verify_timestamps.py), and queue timeouts (queue_timeout_test.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from triton_qa import models
from triton_qa.core import (
    GPU,
    OTHER,
    TENSORFLOW,
    TENSORRT,
    Check,
    Config,
    LeftOut,
    Run,
    Server,
    Suite,
    SuiteContext,
)
from triton_qa.suites._common import BACKEND_DIR, fresh

BACKENDS = ["onnx", "libtorch", "python"]
SERVER_ARGS_EXTRA = [f"--backend-directory={BACKEND_DIR}", "--backend-config=tensorflow,version=2"]
NO_DELAY_TESTS = [
    "test_static_batch_preferred",
    "test_static_batch_lt_any_preferred",
    "test_static_batch_not_preferred",
    "test_static_batch_gt_max_preferred",
    "test_multi_batch_not_preferred",
    "test_multi_batch_gt_max_preferred",
    "test_multi_batch_sum_gt_max_preferred",
    "test_multi_same_output0",
    "test_multi_same_output1",
    "test_multi_different_outputs",
    "test_multi_different_output_order",
]
# test.sh: 6 for use_biggest_preferred, 3 for use_best_preferred and delayed_use_max_batch, 2 for the others (its
# chain of `export ... && [[ ... ]] && export ...`).
DELAY_TESTS = {
    "test_multi_batch_delayed_sum_gt_max_preferred": 2,
    "test_multi_batch_use_biggest_preferred": 6,
    "test_multi_batch_use_best_preferred": 3,
    "test_multi_batch_delayed_use_max_batch": 3,
}
DIFFERENT_SHAPE_TESTS = [
    "test_multi_batch_not_preferred_different_shape",
    "test_multi_batch_preferred_different_shape",
    "test_multi_batch_different_shape_allow_ragged",
    "test_multi_batch_different_shape",
]
PREFERRED_BATCH_ONLY_TESTS = {
    "test_preferred_batch_only_aligned": 4,
    "test_preferred_batch_only_unaligned": 5,
    "test_preferred_batch_only_use_biggest_preferred": 7,
    "test_preferred_batch_only_use_no_preferred_size": 3,
}
MAX_QUEUE_DELAY_ONLY_TESTS = {
    "test_max_queue_delay_only_default": 0,
    "test_max_queue_delay_only_non_default": 20000,
}


def _add_models(ctx: SuiteContext, data: str, dest: Path, dynamic_batching: str) -> None:
    src = ctx.data(data)
    for backend in BACKENDS:
        name = f"{backend}_float32_float32_float32"
        if backend == "python":
            onnx = src / "onnx_float32_float32_float32"
            model = dest / name
            (model / "1").mkdir(parents=True)
            text = re.sub(r"platform:.*", 'backend: "python"', models.config(onnx).read_text()).replace(
                "onnx", "python"
            )
            models.config(model).write_text(text)
            shutil.copy(onnx / "output0_labels.txt", model)
            shutil.copy(ctx.qa / "python_models" / "add_sub" / "model.py", model / "1" / "model.py")
        else:
            shutil.copytree(src / name, dest / name)
        cfg = models.config(dest / name)
        models.sed(cfg, r"^max_batch_size:.*", "max_batch_size: 8")
        models.sed(cfg, r"^version_policy:.*", "version_policy: { specific { versions: [1] }}")
        models.append(cfg, dynamic_batching)


def _ragged_identity(ctx: SuiteContext, dest: Path, kind: str) -> None:
    name = f"{kind}_zero_1_float32"
    io = ("INPUT__0", "OUTPUT__0") if kind == "libtorch" else ("INPUT0", "OUTPUT0")
    shutil.copytree(ctx.data("qa_identity_model_repository") / f"{kind}_nobatch_zero_1_float32", dest / name)
    cfg = models.config(dest / name)
    models.sed(cfg, "nobatch_", "")
    models.sed(cfg, r"^max_batch_size:.*", "max_batch_size: 8")
    models.sed(cfg, f'name: "{io[0]}"', f'name: "{io[0]}"\nallow_ragged_batch: true')
    models.append(
        cfg,
        f'batch_output [{{target_name: "{io[1]}" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "{io[0]}" }}] '
        "dynamic_batching { preferred_batch_size: [ 2, 6 ], max_queue_delay_microseconds: 10000000 }",
    )


def build(ctx: SuiteContext) -> None:
    delayed = "dynamic_batching { preferred_batch_size: [ 2, 6 ], max_queue_delay_microseconds: 10000000 }"
    _add_models(ctx, "qa_model_repository", fresh(ctx.path("models")), delayed)
    _add_models(
        ctx,
        "qa_model_repository",
        fresh(ctx.path("preferred_batch_only_models")),
        "dynamic_batching { preferred_batch_size: [ 4, 6 ] }",
    )
    var = fresh(ctx.path("var_models"))
    _add_models(ctx, "qa_variable_model_repository", var, delayed)
    for cfg in var.glob("*/config.pbtxt"):
        models.sed(cfg, "16", "-1")
    zero = var / "custom_zero_1_float32"
    shutil.copytree(ctx.qa / "custom_models" / "custom_zero_1_float32", zero)
    (zero / "1").mkdir()
    cfg = models.config(zero)
    models.append(cfg, "instance_group [ { kind: KIND_GPU count: 1 }]")
    models.sed(cfg, r"^max_batch_size:.*", "max_batch_size: 8")
    models.sed(cfg, r"dims:.*\[.*\]", "dims: [ -1 ]")
    models.sed(cfg, r'name:.*"INPUT0"', 'name: "INPUT0"\nallow_ragged_batch: true')
    models.sed(cfg, r"^version_policy:.*", "version_policy: { specific { versions: [1] }}")
    models.append(cfg, delayed)
    for kind in ("onnx", "libtorch"):
        _ragged_identity(ctx, var, kind)
    # queue_timeout_test.py's model.
    qmodels = fresh(ctx.path("queue_timeout_models"))
    (qmodels / "dynamic_batch" / "1").mkdir(parents=True)
    models.config(qmodels / "dynamic_batch").write_text(
        'backend: "identity"\nmax_batch_size: 1\n'
        'input [{ name: "INPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]\n'
        'output [{ name: "OUTPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]\n'
        "instance_group [{ count: 1 \n kind: KIND_CPU }]\n"
        "dynamic_batching {\n  preferred_batch_size: [ 1 ]\n"
        "  default_queue_policy { timeout_action: REJECT \n default_timeout_microseconds: 1000000 \n"
        " max_queue_size: 8 }\n}\n"
        'parameters [{ key: "execute_delay_ms" \n value: { string_value: "8000" } }]\n'
    )


def _custom_models(ctx: SuiteContext, body: str) -> None:
    repo = fresh(ctx.path("custom_models"))
    zero = repo / "custom_zero_1_float32"
    shutil.copytree(ctx.qa / "custom_models" / "custom_zero_1_float32", zero)
    (zero / "1").mkdir(exist_ok=True)
    cfg = models.config(zero)
    models.sed(cfg, r"dims:.*\[.*\]", "dims: [ -1 ]")
    models.append(cfg, body)
    models.translate_repositories([f"--model-repository={repo}"], ctx.work)


def _max_queue_delay_models(delay_us: int):  # type: ignore[no-untyped-def]
    def setup(ctx: SuiteContext) -> None:
        build_once(ctx)
        _custom_models(
            ctx,
            "dynamic_batching { max_queue_delay_microseconds: 0}\ninstance_group [ { kind: KIND_GPU } ]\n"
            'parameters [\n{ key: "execute_delay_ms"; value: { string_value: "100" }}\n]',
        )
        cfg = models.config(ctx.path("custom_models/custom_zero_1_float32"))
        models.sed(cfg, r"max_batch_size:.*", "max_batch_size: 100")
        # test.sh's sed for the delay matches nothing ('max_queue_delay_microseconds:.*\[.*\]'): the delay stays 0.
        _ = delay_us

    return setup


def _preserve_models(preserve: bool):  # type: ignore[no-untyped-def]
    def setup(ctx: SuiteContext) -> None:
        build_once(ctx)
        batching = "dynamic_batching { preferred_batch_size: [ 4 ]" + (
            " preserve_ordering: true }" if preserve else " }"
        )
        _custom_models(
            ctx,
            f"{batching}\ninstance_group [ {{ kind: KIND_GPU count: 2 }}]\nparameters [\n"
            '{ key: "execute_delay_ms"; value: { string_value: "100" }},\n'
            '{ key: "instance_wise_delay_multiplier"; value: { string_value: "4" }}\n]',
        )
        models.sed(
            models.config(ctx.path("custom_models/custom_zero_1_float32")),
            r"max_batch_size:.*",
            "max_batch_size: 4",
        )

    return setup


def build_once(ctx: SuiteContext) -> None:
    marker = ctx.path(".triton_qa_built")
    if not marker.exists():
        build(ctx)
        marker.write_text("")


def _verify_timestamps(trace: str, preserve: bool) -> Check:
    def check(ctx: SuiteContext, server: Server | None) -> str | None:
        cmd = [ctx.python, "verify_timestamps.py", *(["-p"] if preserve else []), trace]
        proc = subprocess.run(cmd, cwd=ctx.work, capture_output=True, text=True, timeout=120)
        if proc.returncode == 0:
            return None
        output = (proc.stdout + proc.stderr)[-800:]
        return f"verify_timestamps.py {' '.join(cmd[2:])} exited {proc.returncode}: {output}"

    return Check(f"verify_timestamps_{'preserve' if preserve else 'not_preserve'}", check)


def configs(ctx: SuiteContext) -> list[Config]:
    out: list[Config] = []
    env = {"BACKENDS": " ".join(BACKENDS)}

    def add(
        name: str, repo: str, test: str, extra_env: dict[str, str], full_only: bool = False, **kw
    ) -> None:  # type: ignore[no-untyped-def]
        out.append(
            Config(
                name=name,
                args=[f"--model-repository={ctx.work}/{repo}", *kw.pop("args", []), *SERVER_ARGS_EXTRA],
                setup=kw.pop("setup", build_once),
                env={**env, **extra_env},
                steps=[Run("batcher_test.py", [f"BatcherTest.{test}"])],
                full_only=full_only,
                **kw,
            )
        )

    for batcher in ("FIXED", "VARIABLE"):
        repo = "models" if batcher == "FIXED" else "var_models"
        for test in NO_DELAY_TESTS:
            add(f"{batcher}-{test}", repo, test, {"BATCHER_TYPE": batcher}, full_only=batcher == "VARIABLE")
        for test, delay in DELAY_TESTS.items():
            add(
                f"{batcher}-{test}",
                repo,
                test,
                {"BATCHER_TYPE": batcher, "TRITONSERVER_DELAY_SCHEDULER": str(delay)},
            )
    for test in DIFFERENT_SHAPE_TESTS:
        add(f"VARIABLE-{test}", "var_models", test, {"BATCHER_TYPE": "VARIABLE"})
    add(
        "VARIABLE-test_multi_batch_delayed_preferred_different_shape",
        "var_models",
        "test_multi_batch_delayed_preferred_different_shape",
        {"BATCHER_TYPE": "VARIABLE", "TRITONSERVER_DELAY_SCHEDULER": "4"},
    )
    for test, delay in PREFERRED_BATCH_ONLY_TESTS.items():
        add(
            f"PREFERRED_BATCH_ONLY-{test}",
            "preferred_batch_only_models",
            test,
            {"BATCHER_TYPE": "FIXED", "TRITONSERVER_DELAY_SCHEDULER": str(delay)},
        )
    for test, delay_us in MAX_QUEUE_DELAY_ONLY_TESTS.items():
        add(
            f"MAX_QUEUE_DELAY_ONLY-{test}",
            "custom_models",
            test,
            {"BATCHER_TYPE": "FIXED", "MAX_QUEUE_DELAY_MICROSECONDS": str(delay_us)},
            setup=_max_queue_delay_models(delay_us),
        )
    for preserve in (False, True):
        trace = "preserve.log" if preserve else "not_preserve.log"
        add(
            f"{'preserve' if preserve else 'not_preserve'}-test_multi_batch_preserve_ordering",
            "custom_models",
            "test_multi_batch_preserve_ordering",
            {"BATCHER_TYPE": "FIXED", "TRITONSERVER_DELAY_SCHEDULER": "12"},
            setup=_preserve_models(preserve),
            args=[f"--trace-file={trace}", "--trace-level=MIN", "--trace-rate=1"],
            after=[_verify_timestamps(trace, preserve)],
        )
    out.append(
        Config(
            name="queue_timeout_test",
            args=[f"--model-repository={ctx.work}/queue_timeout_models", "--log-verbose=2"],
            setup=build_once,
            steps=[Run("queue_timeout_test.py")],
        )
    )
    return out


SUITE = Suite(
    name="L0_batcher",
    configs=configs,
    left_out=[
        LeftOut("graphdef and savedmodel models", TENSORFLOW),
        LeftOut("plan models (and plan_zero_1_float32 of var_models)", TENSORRT),
        LeftOut("TEST_CUDA_SHARED_MEMORY=1 job (L0_batcher_cudashm)", GPU),
        LeftOut(
            "TEST_SYSTEM_SHARED_MEMORY=1 job (L0_batcher_shm)", OTHER, "runtime: the suite runs once, without"
        ),
    ],
    notes=[
        "The `identity` C++ backend of custom_zero_1_float32 and dynamic_batch is stood in for by a python model; "
        "KIND_GPU instance groups are KIND_CPU.",
        "The queue_timeout_test.py model is in a folder of its own (test.sh rebuilds `models` for it at the end).",
    ],
)
