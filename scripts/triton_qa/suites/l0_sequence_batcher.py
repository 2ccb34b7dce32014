"""qa/L0_sequence_batcher: sequence_batcher_test.py over the model trials of test.sh (0: nobatch, 4 instances;
1, 2, 4: max_batch_size 4/2/1 with 1/2/4 instances; v: variable-size models), ONNX, libtorch, python and the
`sequence` backend (stood in for), with their ensembles; then ragged batches, queue delays, request timeouts and
preserve ordering.

test.sh starts a server per test, and so does this recipe (about 20 s each). Without --full, the no-delay tests
run for trials 0, 1 and v and the delay tests for 1 and v; --full runs every trial.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from triton_qa import models
from triton_qa.core import GPU, OTHER, TENSORFLOW, TENSORRT, Config, LeftOut, Run, Suite, SuiteContext
from triton_qa.suites._common import BACKEND_DIR, fresh

BACKENDS = ["onnx", "libtorch", "custom", "python"]
TRIALS = ["0", "1", "2", "4", "v"]
# Without --full: the trials whose tests run (no-delay tests) and those whose delay tests run too.
DEFAULT_TRIALS = ["0", "1", "v"]
DEFAULT_DELAY_TRIALS = ["1", "v"]
NO_DELAY_TESTS = [
    "test_simple_sequence",
    "test_length1_sequence",
    "test_batch_size",
    "test_no_sequence_start",
    "test_no_sequence_start2",
    "test_no_sequence_end",
    "test_no_correlation_id",
]
DELAY_TESTS = [
    "test_backlog_fill",
    "test_backlog_fill_no_end",
    "test_backlog_same_correlation_id",
    "test_backlog_same_correlation_id_no_end",
    "test_backlog_sequence_timeout",
    "test_half_batch",
    "test_skip_batch",
    "test_full_batch",
    "test_ragged_batch",
    "test_backlog",
]
QUEUE_DELAY_TESTS = [
    "test_queue_delay_no_min_util",
    "test_queue_delay_half_min_util",
    "test_queue_delay_full_min_util",
]
SERVER_ARGS_EXTRA = [
    f"--backend-directory={BACKEND_DIR}",
    "--backend-config=tensorflow,version=2",
    "--log-verbose=1",
]
NOT_YET_TIMEOUT = "sequence batcher request timeouts: not yet (compatibility.md, Sequence batching)"
NOT_YET_PRESERVE = (
    "sequence_batching.oldest.preserve_ordering: not yet (compatibility.md), the models fail to load"
)


def _delay_env(test: str) -> dict[str, str]:
    """The TRITONSERVER_BACKLOG_DELAY_SCHEDULER / TRITONSERVER_DELAY_SCHEDULER test.sh sets for a delay test."""
    backlog = {"test_backlog_fill_no_end": 3, "test_backlog_fill": 2, "test_backlog_same_correlation_id": 2}
    delay = {
        "test_backlog_fill_no_end": 10,
        "test_backlog_fill": 10,
        "test_backlog_same_correlation_id_no_end": 16,
        "test_half_batch": 8,
        "test_backlog_sequence_timeout": 4,
    }
    return {
        "TRITONSERVER_BACKLOG_DELAY_SCHEDULER": str(backlog.get(test, 0)),
        "TRITONSERVER_DELAY_SCHEDULER": str(delay.get(test, 12)),
    }


def _add_python_model(ctx: SuiteContext, onnx_model: Path, dest: Path) -> None:
    """generate_python_models of test.sh: an onnx model or ensemble turned into its python twin."""
    name = onnx_model.name.replace("onnx", "python")
    target = dest / name
    (target / "1").mkdir(parents=True, exist_ok=True)
    text = models.config(onnx_model).read_text()
    if "ensemble" in str(onnx_model.parent.parent.name):
        config_text = text.replace("onnx", "python")
    else:
        config_text = re.sub(r"platform:.*", 'backend: "python"', text).replace("onnx", "python")
        shutil.copy(ctx.qa / "python_models" / "sequence_int32" / "model.py", target / "1" / "model.py")
    models.config(target).write_text(config_text)


def _collect(ctx: SuiteContext, repo: str, ens_repo: str, nobatch: bool) -> list[tuple[str, Path]]:
    """(kind, source path) of the models test.sh's MODELS loop copies for one repository."""
    part = "nobatch_sequence" if nobatch else "sequence"
    data = ctx.data(repo)
    ens = ctx.data(f"qa_ensemble_model_repository/{ens_repo}")
    out: list[tuple[str, Path]] = []
    for backend in BACKENDS:
        if backend == "custom":
            out.append(("custom", ctx.qa / "custom_models" / "custom_sequence_int32"))
            continue
        for dtype in ("int32", "bool"):
            if backend == "python":
                onnx = data / f"onnx_{part}_{dtype}"
                out.append(("python", onnx))
            else:
                out.append((backend, data / f"{backend}_{part}_{dtype}"))
        for p in sorted(ens.glob(f"*_{'onnx' if backend == 'python' else backend}_{part}_int32")):
            out.append(("python" if backend == "python" else backend, p))
    return out


def _copy(ctx: SuiteContext, kind: str, src: Path, dest: Path) -> Path | None:
    if not src.exists():
        return None
    if kind == "python":
        _add_python_model(ctx, src, dest)
        return dest / src.name.replace("onnx", "python")
    target = dest / src.name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(src, target)
    return target


def _set_batch_and_count(model: Path, max_batch_size: int | None, count: int) -> None:
    cfg = models.config(model)
    if max_batch_size is not None:
        models.sed(cfg, r"^max_batch_size:.*", f"max_batch_size: {max_batch_size}")
    models.sed(cfg, r"kind: KIND_GPU", f"kind: KIND_GPU\ncount: {count}")
    models.sed(cfg, r"kind: KIND_CPU", f"kind: KIND_CPU\ncount: {count}")


def build_repositories(ctx: SuiteContext) -> None:
    """The model folders of test.sh: models0, models1, models2, models4, modelsv, queue_delay_models."""
    fixed, var = "qa_sequence_model_repository", "qa_variable_sequence_model_repository"
    dirs = {
        n: fresh(ctx.path(n))
        for n in ("models0", "models1", "models2", "models4", "modelsv", "queue_delay_models")
    }
    for kind, src in _collect(ctx, fixed, fixed, nobatch=False):
        for name, mbs, count in (
            ("models1", 4, 1),
            ("models2", 2, 2),
            ("models4", 1, 4),
            ("queue_delay_models", 4, 1),
        ):
            model = _copy(ctx, kind, src, dirs[name])
            if model is None:
                continue
            _set_batch_and_count(model, mbs, count)
            if name == "queue_delay_models":
                cfg = models.config(model)
                models.sed(
                    cfg,
                    r"sequence_batching \{",
                    "sequence_batching {\ndirect {\nmax_queue_delay_microseconds: 3000000\n"
                    "minimum_slot_utilization: 0\n}",
                )
                for suffix, util in (("_half", "0.5"), ("_full", "1")):
                    twin = dirs[name] / (model.name + suffix)
                    if twin.exists():
                        shutil.rmtree(twin)
                    shutil.copytree(model, twin)
                    models.sed(models.config(twin), re.escape(model.name), twin.name, count=1)
                    models.sed(
                        models.config(twin),
                        r"minimum_slot_utilization: 0",
                        f"minimum_slot_utilization: {util}",
                    )
    for kind, src in _collect(ctx, fixed, fixed, nobatch=True):
        model = _copy(ctx, kind, src, dirs["models0"])
        if model is not None:
            _set_batch_and_count(model, None, 4)
    for kind, src in _collect(ctx, var, var, nobatch=False):
        if kind == "python":  # test.sh takes the python twins' ensembles from the fixed repository
            if "ensemble" in str(src.parent.parent.name):
                src = ctx.data(f"qa_ensemble_model_repository/{fixed}") / src.name
            else:
                src = ctx.data(var) / src.name
        model = _copy(ctx, kind, src, dirs["modelsv"])
        if model is not None:
            _set_batch_and_count(model, 4, 1)
    nop_src = ctx.data(f"qa_ensemble_model_repository/{fixed}")
    for trial in TRIALS:
        repo = dirs[f"models{trial}"]
        models.copy_models(nop_src, repo, ["nop_*"])
        models.nop_version_dirs(repo)
    # ragged_models: custom_sequence_int32 with allow_ragged_batch on INPUT.
    ragged = fresh(ctx.path("ragged_models"))
    shutil.copytree(ctx.qa / "custom_models" / "custom_sequence_int32", ragged / "custom_sequence_int32")
    models.sed(
        models.config(ragged / "custom_sequence_int32"),
        r'name:.*"INPUT"',
        'name: "INPUT"\nallow_ragged_batch: true',
    )
    for p in dirs["queue_delay_models"].iterdir():
        if p.name.startswith(("simple_", "fan_", "sequence_")):
            shutil.rmtree(p)
    # request_timeout_models (in the suite's folder) and preserve_ordering_models.
    (ctx.path("request_timeout_models") / "custom_sequence_int32_timeout" / "1").mkdir(
        parents=True, exist_ok=True
    )
    preserve = fresh(ctx.path("preserve_ordering_models"))
    base = ctx.qa / "python_models" / "sequence_py"
    for mode in ("decoupled", "nondecoupled"):
        no = preserve / f"seqpy_no_preserve_ordering_{mode}"
        (no / "1").mkdir(parents=True)
        shutil.copy(base / "config.pbtxt", no / "config.pbtxt")
        shutil.copy(base / "model.py", no / "1" / "model.py")
        yes = preserve / f"seqpy_preserve_ordering_{mode}"
        shutil.copytree(no, yes)
        models.sed(models.config(yes), r"^preserve_ordering: False", "preserve_ordering: True")
        models.sed(models.config(yes), r"preserve_ordering: False", "preserve_ordering: True")
        if mode == "decoupled":
            for m in (no, yes):
                models.append(models.config(m), "\nmodel_transaction_policy { decoupled: true }")
    for name in [*dirs, "ragged_models", "request_timeout_models"]:
        models.replace_test_backends(ctx.path(name))


def configs(ctx: SuiteContext) -> list[Config]:
    built: list[bool] = []

    def setup(c: SuiteContext) -> None:
        if not built:
            build_repositories(c)
            built.append(True)

    base_env = {
        "BACKENDS": " ".join(BACKENDS),
        "ENSEMBLES": "1",
        "IMPLICIT_STATE": "0",
        "INITIAL_STATE_FILE": "0",
        "INITIAL_STATE_ZERO": "0",
        "USE_SINGLE_BUFFER": "0",
    }
    out: list[Config] = []
    for trial in TRIALS:
        trial_env = {
            **base_env,
            "NO_BATCHING": "1" if trial == "0" else "0",
            "MODEL_INSTANCES": "1" if trial == "v" else ("4" if trial == "0" else trial),
            "BATCHER_TYPE": "VARIABLE" if trial == "v" else "FIXED",
        }
        args = [f"--model-repository={ctx.work}/models{trial}", *SERVER_ARGS_EXTRA]
        for test in NO_DELAY_TESTS:
            out.append(
                Config(
                    name=f"models{trial}-{test}",
                    args=args,
                    setup=setup,
                    env=trial_env,
                    steps=[Run("sequence_batcher_test.py", [f"SequenceBatcherTest.{test}"])],
                    full_only=trial not in DEFAULT_TRIALS,
                )
            )
        for test in DELAY_TESTS:
            out.append(
                Config(
                    name=f"models{trial}-{test}",
                    args=args,
                    setup=setup,
                    env={**trial_env, **_delay_env(test)},
                    steps=[Run("sequence_batcher_test.py", [f"SequenceBatcherTest.{test}"])],
                    full_only=trial not in DEFAULT_DELAY_TRIALS,
                )
            )
    fixed1 = {**base_env, "NO_BATCHING": "0", "MODEL_INSTANCES": "1", "BATCHER_TYPE": "FIXED"}
    out.append(
        Config(
            name="ragged_models-test_ragged_batch_allowed",
            args=[f"--model-repository={ctx.work}/ragged_models", *SERVER_ARGS_EXTRA],
            setup=setup,
            env={**fixed1, "TRITONSERVER_BACKLOG_DELAY_SCHEDULER": "0", "TRITONSERVER_DELAY_SCHEDULER": "12"},
            steps=[Run("sequence_batcher_test.py", ["SequenceBatcherTest.test_ragged_batch_allowed"])],
        )
    )
    for test in QUEUE_DELAY_TESTS:
        out.append(
            Config(
                name=f"queue_delay_models-{test}",
                args=[f"--model-repository={ctx.work}/queue_delay_models", *SERVER_ARGS_EXTRA],
                setup=setup,
                env={
                    **base_env,
                    "NO_BATCHING": "0",
                    "MODEL_INSTANCES": "4",
                    "BATCHER_TYPE": "FIXED",
                    "TRITONSERVER_BACKLOG_DELAY_SCHEDULER": "0",
                    "TRITONSERVER_DELAY_SCHEDULER": "2",
                },
                steps=[Run("sequence_batcher_test.py", [f"SequenceBatcherTest.{test}"])],
            )
        )
    out.append(
        Config(
            name="request_timeout_models",
            args=[f"--model-repository={ctx.work}/request_timeout_models", *SERVER_ARGS_EXTRA],
            setup=setup,
            env=fixed1,
            steps=[Run("sequence_batcher_test.py", ["SequenceBatcherRequestTimeoutTest"])],
            known={"SequenceBatcherRequestTimeoutTest.*": NOT_YET_TIMEOUT},
        )
    )
    out.append(
        Config(
            name="preserve_ordering_models",
            args=[f"--model-repository={ctx.work}/preserve_ordering_models", *SERVER_ARGS_EXTRA],
            setup=setup,
            env=fixed1,
            steps=[Run("sequence_batcher_test.py", ["SequenceBatcherPreserveOrderingTest"])],
            unsupported=NOT_YET_PRESERVE,
            known={"SequenceBatcherPreserveOrderingTest.*": NOT_YET_PRESERVE},
        )
    )
    return out


SUITE = Suite(
    name="L0_sequence_batcher",
    configs=configs,
    left_out=[
        LeftOut("graphdef and savedmodel sequence models", TENSORFLOW),
        LeftOut("plan sequence models", TENSORRT),
        LeftOut("TEST_CUDA_SHARED_MEMORY=1 job", GPU),
        LeftOut(
            "IMPLICIT_STATE=1 / INITIAL_STATE_* jobs (L0_sequence_batcher run with implicit-state models)",
            OTHER,
            "L0_implicit_state covers implicit state",
        ),
        LeftOut(
            "TEST_SYSTEM_SHARED_MEMORY=1 job", OTHER, "runtime: the suite is run once, without shared memory"
        ),
    ],
    notes=[
        "The `sequence` C++ backend (custom_sequence_int32, BACKENDS 'custom') and the `identity` backend of the "
        "nop_* ensemble steps and custom_sequence_int32_timeout are stood in for by python models "
        "(scripts/triton_qa/stand_ins).",
        "The nop_* models stay KIND_CPU (test.sh moves them to KIND_GPU).",
        "One server per test, as test.sh; a delay test's server has test.sh's TRITONSERVER_DELAY_SCHEDULER and "
        "TRITONSERVER_BACKLOG_DELAY_SCHEDULER.",
    ],
)
