"""qa/L0_batch_input (ragged batching: batch_input / batch_output, allow_ragged_batch), batch_input_test.py on the
ONNX and libtorch ragged models, one server per kind as test.sh does."""

from __future__ import annotations

import shutil

from triton_qa import models
from triton_qa.core import TENSORFLOW, TENSORRT, Config, LeftOut, Run, Suite, SuiteContext
from triton_qa.suites._common import fresh


def setup_for(backend: str):  # type: ignore[no-untyped-def]
    def setup(ctx: SuiteContext) -> None:
        repo = fresh(ctx.path("models"))
        ragged = ctx.data("qa_ragged_model_repository")

        def copy(src: str, name: str, subs: list[tuple[str, str, int]]) -> None:
            shutil.copytree(ragged / src, repo / name)
            for pattern, repl, count in subs:
                models.sed(models.config(repo / name), pattern, repl, count=count)

        copy(
            f"{backend}_batch_input",
            "ragged_element_count_acc_zero",
            [(f"{backend}_batch_input", "ragged_element_count_acc_zero", 0)],
        )
        copy(
            f"{backend}_batch_input",
            "ragged_acc_shape",
            [
                (f"{backend}_batch_input", "ragged_acc_shape", 0),
                ("BATCH_ELEMENT_COUNT", "BATCH_ACCUMULATED_ELEMENT_COUNT", 0),
                ("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE", 0),
            ],
        )
        copy(
            f"{backend}_batch_input",
            "batch_item_flatten",
            [
                (f"{backend}_batch_input", "batch_item_flatten", 0),
                ("-1", "-1, -1", 1),
                ("BATCH_ELEMENT_COUNT", "BATCH_ACCUMULATED_ELEMENT_COUNT", 0),
                ("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", "BATCH_ITEM_SHAPE_FLATTEN", 0),
            ],
        )
        copy(f"{backend}_batch_item", "batch_item", [(f"{backend}_batch_item", "batch_item", 0)])
        io = repo / "ragged_io"
        shutil.copytree(ctx.data("qa_identity_model_repository") / f"{backend}_nobatch_zero_1_float32", io)
        cfg = models.config(io)
        models.sed(cfg, "__0", "0", first_per_line=True)
        models.sed(cfg, f"{backend}_nobatch_zero_1_float32", "ragged_io")
        models.sed(cfg, r"^max_batch_size:.*", "max_batch_size: 4")
        models.sed(cfg, 'name: "INPUT0"', 'name: "INPUT0"\nallow_ragged_batch: true')
        models.append(
            cfg,
            'batch_output [{target_name: "OUTPUT0" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "INPUT0" }] '
            "dynamic_batching { max_queue_delay_microseconds: 1000000 }",
        )

    return setup


def configs(ctx: SuiteContext) -> list[Config]:
    return [
        Config(
            name=backend,
            args=["--model-repository=models", "--exit-timeout-secs=120"],
            setup=setup_for(backend),
            env={"BACKENDS": backend},
            steps=[Run("batch_input_test.py")],
        )
        for backend in ("onnx", "libtorch")
    ]


SUITE = Suite(
    name="L0_ragged_batching",
    qa_dir="L0_batch_input",
    configs=configs,
    left_out=[LeftOut("savedmodel ragged models", TENSORFLOW), LeftOut("plan ragged models", TENSORRT)],
    notes=["Triton 2.51 has no qa/L0_ragged_batching: its ragged-batching suite is qa/L0_batch_input."],
)
