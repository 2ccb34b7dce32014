"""qa/L0_shared_memory: system shared memory over HTTP and gRPC (shared_memory_test.py, a server per test and
client type, which must then shut down cleanly), and unregistering a region while a request uses it."""

from __future__ import annotations

import shutil
from pathlib import Path

from triton_qa.core import Check, Config, Run, Server, Suite, SuiteContext
from triton_qa.suites._common import BACKEND_DIR, fresh

EXAMPLES = Path(__file__).resolve().parents[3] / "src" / "modelhost" / "examples"
TESTS = [
    "test_invalid_create_shm",
    "test_valid_create_set_register",
    "test_unregister_before_register",
    "test_unregister_after_register",
    "test_reregister_after_register",
    "test_unregister_after_inference",
    "test_register_after_inference",
    "test_too_big_shm",
    "test_mixed_raw_shm",
    "test_unregisterall",
    "test_infer_offset_out_of_bound",
    "test_infer_byte_size_out_of_bound",
    "test_register_out_of_bound",
    "test_python_client_leak",
]


def setup(ctx: SuiteContext) -> None:
    if not ctx.path("models/simple").exists():
        shutil.copytree(EXAMPLES / "simple", fresh(ctx.path("models")) / "simple")
    if not ctx.path("python_models/simple").exists():
        model = fresh(ctx.path("python_models")) / "simple"
        (model / "1").mkdir(parents=True)
        shutil.copy(ctx.qa / "python_models" / "execute_delayed_model" / "model.py", model / "1" / "model.py")
        shutil.copy(
            ctx.qa / "python_models" / "execute_delayed_model" / "config.pbtxt", model / "config.pbtxt"
        )


def _clean_exit(ctx: SuiteContext, server: Server | None) -> str | None:
    rc = server.proc.returncode if server is not None and server.proc is not None else None
    return (
        None
        if rc == 0
        else f"the server exited with status {rc} after SIGTERM (test.sh: 'shut down non-gracefully')"
    )


def configs(ctx: SuiteContext) -> list[Config]:
    extra = ["--log-verbose=1", f"--backend-directory={BACKEND_DIR}"]
    out = [
        Config(
            name=f"{test}.{client}",
            args=[f"--model-repository={ctx.work}/models", *extra],
            setup=setup,
            env={"CLIENT_TYPE": client},
            steps=[Run("shared_memory_test.py", [f"SharedMemoryTest.{test}"])],
            after=[Check("server_shut_down_gracefully", _clean_exit)],
            suspect={
                "test_invalid_create_shm": "client-side only (no server call): tritonclient's message for a negative "
                "size differs from 2.51's 'unable to initialize the size'"
            },
        )
        for test in TESTS
        for client in ("http", "grpc")
    ]
    out += [
        Config(
            name=f"unregister_shm.{client}",
            args=[f"--model-repository={ctx.work}/python_models", *extra],
            setup=setup,
            env={"CLIENT_TYPE": client},
            steps=[
                Run(
                    "shared_memory_test.py",
                    [f"TestSharedMemoryUnregister.test_unregister_shm_during_inference_{client}"],
                )
            ],
            after=[Check("server_shut_down_gracefully", _clean_exit)],
        )
        for client in ("http", "grpc")
    ]
    return out


SUITE = Suite(
    name="L0_shared_memory",
    configs=configs,
    notes=[
        "docs/examples/model_repository/simple (a TensorFlow graphdef) is stood in for by modelhost's bundled ONNX "
        "`simple` (same inputs, outputs and arithmetic)."
    ],
)
