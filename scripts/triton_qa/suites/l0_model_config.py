"""qa/L0_model_config: model configurations the server must refuse (the server does not come up and an E line of
its log says why, from the `expected*` files) or complete (compare_status.py compares the configuration it
serves with the `expected*` ones), for the ONNX, libtorch, python and ensemble models of the suite; and the CLI
messages of the deprecated --strict-model-config."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable

from triton_qa.core import (
    CPP_BACKEND,
    OTHER,
    TENSORFLOW,
    TENSORRT,
    Check,
    Config,
    LeftOut,
    Server,
    Suite,
    SuiteContext,
)
from triton_qa.models import replace_test_backends
from triton_qa.suites._common import fresh

# TRIALS of test.sh this runs (tensorflow_savedmodel, tensorflow_graphdef and tensorrt_plan are left out).
TRIALS = ["onnxruntime_onnx", "pytorch_libtorch"]
AUTOFILL_KINDS = ["common", "ensemble", "onnx", "python", "pytorch"]
SUCCESS_KINDS = ["ensemble", "onnx", "python", "pytorch"]
NO_CONFIG_TARGETS = {
    "no_config",
    "no_config_variable",
    "no_config_shape_tensor",
    "no_config_non_linear_format_io",
}

PYTORCH_DIRS = [
    "autofill_noplatform/pytorch/too_few_inputs/1",
    "autofill_noplatform/pytorch/too_few_outputs/1",
    "autofill_noplatform_success/pytorch/no_name_platform/1",
    "autofill_noplatform_success/pytorch/cpu_instance/1",
]
PYTHON_AUTO_COMPLETE_DIRS = [
    "autofill_noplatform/python/input_mismatch_datatype/1",
    "autofill_noplatform/python/input_mismatch_dims/1",
    "autofill_noplatform/python/output_mismatch_datatype/1",
    "autofill_noplatform/python/output_mismatch_dims/1",
    "autofill_noplatform_success/python/incomplete_output/1",
    "autofill_noplatform_success/python/unknown_input/1",
    "autofill_noplatform_success/python/unknown_output/1",
    "autofill_noplatform_success/python/empty_config/1",
]
PYTHON_OWN_MODEL_DIRS = [
    "autofill_noplatform/python/conflicting_max_batch_size",
    "autofill_noplatform/python/input_missing_datatype",
    "autofill_noplatform/python/input_missing_dims",
    "autofill_noplatform/python/input_missing_name",
    "autofill_noplatform/python/output_missing_datatype",
    "autofill_noplatform/python/output_missing_dims",
    "autofill_noplatform/python/output_missing_name",
    "autofill_noplatform/python/no_return",
    "autofill_noplatform/python/conflicting_scheduler_sequence",
    "autofill_noplatform_success/python/dynamic_batching_no_op",
    "autofill_noplatform_success/python/dynamic_batching",
    "autofill_noplatform_success/python/incomplete_input",
    "autofill_noplatform_success/python/model_transaction_policy",
    "autofill_noplatform_success/python/model_transaction_policy_decoupled_false",
    "autofill_noplatform_success/python/model_transaction_policy_no_op",
    "autofill_noplatform_success/python/optional_input",
    "autofill_noplatform/python/input_wrong_property",
    "autofill_noplatform/python/model_transaction_policy_invalid_args",
    "autofill_noplatform/python/model_transaction_policy_mismatch",
    "autofill_noplatform/python/output_wrong_property",
    "autofill_noplatform_success/python/conflicting_scheduler_ensemble/conflicting_scheduler_ensemble",
    "autofill_noplatform_success/python/conflicting_scheduler_ensemble/ensemble_first_step",
    "autofill_noplatform_success/python/conflicting_scheduler_ensemble/ensemble_second_step",
]


def prepare(ctx: SuiteContext) -> None:
    """The copies and folders test.sh makes before its loops (those of the kinds run here)."""
    marker = ctx.path(".triton_qa_prepared")
    if marker.exists():
        return
    pt = ctx.data("qa_model_repository") / "libtorch_float32_float32_float32" / "1" / "model.pt"
    for d in PYTORCH_DIRS:
        ctx.path(d).mkdir(parents=True, exist_ok=True)
        shutil.copy(pt, ctx.path(d) / "model.pt")
    for d in PYTHON_AUTO_COMPLETE_DIRS:
        ctx.path(d).mkdir(parents=True, exist_ok=True)
        shutil.copy(ctx.qa / "python_models" / "auto_complete" / "model.py", ctx.path(d) / "model.py")
    for d in PYTHON_OWN_MODEL_DIRS:
        (ctx.path(d) / "1").mkdir(parents=True, exist_ok=True)
        shutil.copy(ctx.path(d) / "model.py", ctx.path(d) / "1" / "model.py")
    # Version folders of the ensemble tests (test.sh's long mkdir list: every model folder of those tests).
    for kind in ("autofill_noplatform/ensemble", "autofill_noplatform_success/ensemble"):
        for test in ctx.path(kind).iterdir():
            for model in test.iterdir():
                if model.is_dir() and not model.name[0].isdigit() and (model / "config.pbtxt").exists():
                    (model / "1").mkdir(exist_ok=True)
    for d in (
        "autofill_noplatform/ensemble/invalid_decoupled_branching/repeat_int32/1",
        "autofill_noplatform/ensemble/invalid_decoupled_branching_2/repeat_int32/1",
    ):
        ctx.path(d).mkdir(parents=True, exist_ok=True)
    for d in (
        "noautofill_platform/invalid_cpu/1",
        "noautofill_platform/invalid_gpu/1",
        "noautofill_platform/negative_gpu/1",
    ):
        ctx.path(d).mkdir(parents=True, exist_ok=True)
    (ctx.path("special_cases/runtime_escape/1")).mkdir(parents=True, exist_ok=True)
    (ctx.path("special_cases/runtime_escape/dummy_runtime")).mkdir(parents=True, exist_ok=True)
    (ctx.path("special_cases/runtime_escape/dummy_runtime/libtriton_identity.so")).touch()
    (ctx.path("special_cases/invalid_runtime/1")).mkdir(parents=True, exist_ok=True)
    cpu = ctx.path("autofill_noplatform_success/onnx/cpu_instance/1")
    cpu.mkdir(parents=True, exist_ok=True)
    shutil.copy(ctx.data("qa_identity_model_repository") / "onnx_zero_1_float16" / "1" / "model.onnx", cpu)
    marker.write_text("")


def _bre(pattern: str) -> re.Pattern[str]:
    """grep's basic regular expression as a Python one: ( ) { } + ? | are literal there."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(re.escape(c) if c in "(){}+?|" else c)
        i += 1
    try:
        return re.compile("".join(out))
    except re.error:
        return re.compile(re.escape(pattern))


def _expected_in_log(expected_glob: str, eline: bool) -> Callable[[SuiteContext, Server | None], str | None]:
    def check(ctx: SuiteContext, server: Server | None) -> str | None:
        files = sorted(ctx.work.glob(expected_glob))
        if not files:
            return f"no expected files {expected_glob}"
        log = ctx.server_log.read_text(errors="replace") if ctx.server_log and ctx.server_log.exists() else ""
        lines = [ln for ln in log.splitlines() if not eline or re.match(r"^E[0-9]{4}", ln)]
        wanted = [f.read_text().strip("\n") for f in files]
        for ex in wanted:
            pat = _bre(ex)
            if any(ex in ln or pat.search(ln) for ln in lines):
                return None
        where = "an E line of the server log" if eline else "the server log"
        errors = [ln for ln in log.splitlines() if re.match(r"^E[0-9]{4}", ln)][:3]
        return f"none of {[w[:150] for w in wanted]} in {where}; its errors: {[e[:300] for e in errors]}"

    return check


def _compare_status(model: str) -> Callable[[SuiteContext, Server | None], str | None]:
    def check(ctx: SuiteContext, server: Server | None) -> str | None:
        proc = subprocess.run(
            [ctx.python, "compare_status.py", "--expected_dir", f"models/{model}", "--model", model],
            cwd=ctx.work,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return None if proc.returncode == 0 else (proc.stdout + proc.stderr)[-1500:]

    return check


def _copy_setup(src: str, edit: Callable[[SuiteContext], None] | None = None, contents: bool = False):  # type: ignore[no-untyped-def]
    def setup(ctx: SuiteContext) -> None:
        prepare(ctx)
        repo = fresh(ctx.path("models"))
        source = ctx.path(src)
        if contents:
            for entry in source.iterdir():
                (shutil.copytree if entry.is_dir() else shutil.copy)(entry, repo / entry.name)
        else:
            shutil.copytree(source, repo / source.name)
        if edit is not None:
            edit(ctx)

    return setup


def _set_platform(target: str, trial: str):  # type: ignore[no-untyped-def]
    def edit(ctx: SuiteContext) -> None:
        cfg = ctx.path(f"models/{target}/config.pbtxt")
        if cfg.exists():
            text = "".join(ln for ln in cfg.read_text().splitlines(keepends=True) if "platform:" not in ln)
            cfg.write_text(text + f'platform: "{trial}"\n')

    return edit


def _stand_ins(ctx: SuiteContext) -> None:
    """The ensemble tests' composing models use Triton's C++ `identity` and `repeat` test backends: the python
    stand-ins take their place (the ensembles, whose configurations are under test, are left as they are)."""
    replace_test_backends(ctx.path("models"))


def configs(ctx: SuiteContext) -> list[Config]:
    repo = f"--model-repository={ctx.work}/models"
    out: list[Config] = []

    def refused(
        name: str, args: list[str], setup, expected: str, eline: bool = True, full_only: bool = False
    ) -> None:  # type: ignore[no-untyped-def]
        out.append(
            Config(
                name=name,
                args=args,
                setup=setup,
                start="fail",
                steps=[],
                after=[Check("expected_error_logged", _expected_in_log(expected, eline))],
                start_timeout=30,
                translate_models=False,
                full_only=full_only,
            )
        )

    for target, extra in (
        ("cli_override", ["--disable-auto-complete-config", "--strict-model-config=false"]),
        ("cli_deprecation", ["--strict-model-config=true"]),
    ):
        refused(
            f"cli_messages.{target}",
            [repo, *extra],
            _copy_setup(f"cli_messages/{target}"),
            f"models/{target}/expected*",
            eline=False,
        )
    for target in ("runtime_escape", "invalid_runtime"):
        refused(
            f"special_cases.{target}",
            [repo],
            _copy_setup(f"special_cases/{target}"),
            f"models/{target}/expected*",
        )
    targets = sorted(
        p.name for p in (ctx.triton / "qa" / "L0_model_config" / "noautofill_platform").iterdir()
    )
    for trial in TRIALS:
        for flag in ("--strict-model-config=true", "--disable-auto-complete-config"):
            for target in targets:
                refused(
                    f"noautofill_platform.{trial}.{flag.lstrip('-').split('=')[0]}.{target}",
                    [repo, flag],
                    _copy_setup(f"noautofill_platform/{target}", _set_platform(target, trial)),
                    f"models/{target}/expected*",
                    full_only=not (trial == "onnxruntime_onnx" and flag.startswith("--strict")),
                )
    base = ctx.triton / "qa" / "L0_model_config"
    for kind in AUTOFILL_KINDS:
        for target_dir in sorted((base / "autofill_noplatform" / kind).iterdir()):
            rel = f"autofill_noplatform/{kind}/{target_dir.name}"
            has_config = (target_dir / "config.pbtxt").exists()
            refused(
                rel.replace("/", "."),
                [repo, "--strict-model-config=false"],
                _copy_setup(rel, _stand_ins if kind == "ensemble" else None, contents=not has_config),
                f"models/{target_dir.name}/expected*" if has_config else "models/expected*",
            )
    for kind in SUCCESS_KINDS:
        for target_dir in sorted((base / "autofill_noplatform_success" / kind).iterdir()):
            rel = f"autofill_noplatform_success/{kind}/{target_dir.name}"
            target = target_dir.name
            whole = (target_dir / "config.pbtxt").exists() or target in NO_CONFIG_TARGETS
            out.append(
                Config(
                    name=rel.replace("/", "."),
                    args=[repo, "--strict-model-config=false"],
                    setup=_copy_setup(rel, _stand_ins if kind == "ensemble" else None, contents=not whole),
                    steps=[Check("compare_status", _compare_status(target))],
                    start_timeout=60,
                    translate_models=False,
                )
            )
    return out


SUITE = Suite(
    name="L0_model_config",
    configs=configs,
    left_out=[
        LeftOut(
            "the tensorflow_savedmodel and tensorflow_graphdef trials and autofill folders; special_cases "
            "invalid_platform and noautofill_noconfig, and noautofill_test.py (a graphdef model)",
            TENSORFLOW,
        ),
        LeftOut("the tensorrt_plan trial and autofill folders", TENSORRT),
        LeftOut("the openvino autofill folders", OTHER, "the models come from Triton's QA image"),
        LeftOut(
            "autofill_noplatform(_success)/custom (models of the `identity` backend named by their folder)",
            CPP_BACKEND,
        ),
    ],
    notes=[
        "Without --full: the onnxruntime_onnx trial of noautofill_platform with --strict-model-config=true; --full "
        "adds --disable-auto-complete-config and the pytorch_libtorch trial.",
        "Model folders are used as they are (no KIND_CPU: the configurations are meant to be wrong), but for the "
        "ensemble tests' composing models of Triton's C++ test backends, which get the python stand-ins.",
    ],
)
