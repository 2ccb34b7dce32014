"""qa/L0_model_update: instance updates on a model reload (instance_update_test.py), with the rate limiter off,
on execution count, and on execution count with an explicit resource; the model's "Should not print this" must
never reach the log."""

from __future__ import annotations

import shutil

from triton_qa.core import Check, Config, Run, Server, Suite, SuiteContext
from triton_qa.suites._common import fresh

MODES = {
    "off": ["--rate-limit=off"],
    "execution_count": ["--rate-limit=execution_count"],
    "execution_count_with_explicit_resource": ["--rate-limit=execution_count", "--rate-limit-resource=R1:10"],
}


def setup(ctx: SuiteContext) -> None:
    model = fresh(ctx.path("models")) / "model_init_del"
    shutil.copytree(ctx.qa / "python_models" / "model_init_del", model)
    (model / "1").mkdir()
    shutil.move(model / "model.py", model / "1" / "model.py")


def _not_printed(ctx: SuiteContext, server: Server | None) -> str | None:
    log = ctx.server_log.read_text(errors="replace") if ctx.server_log and ctx.server_log.exists() else ""
    return "the server log has 'Should not print this'" if "Should not print this" in log else None


def configs(ctx: SuiteContext) -> list[Config]:
    return [
        Config(
            name=f"rate_limit_{mode}",
            args=["--model-repository=models", "--model-control-mode=explicit", *args, "--log-verbose=2"],
            setup=setup,
            # test_instance_resource_decrease reads the server log by the name test.sh gives it
            server_log=f"instance_update_test.rate_limit_{mode}.server.log",
            env={"RATE_LIMIT_MODE": mode, "PYTHONDONTWRITEBYTECODE": "True", "MODEL_LOG_DIR": str(ctx.work)},
            steps=[Run("instance_update_test.py", timeout=1500)],
            after=[Check("should_not_print_this_absent", _not_printed)],
        )
        for mode, args in MODES.items()
    ]


SUITE = Suite(name="L0_model_update", configs=configs)
