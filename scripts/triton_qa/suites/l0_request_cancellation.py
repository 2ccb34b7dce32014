"""qa/L0_request_cancellation: gRPC cancellation (grpc_cancellation_test.py, a server per test, the server log
must show the cancellation), cancellation in the schedulers (scheduler_test.py) and of implicit-state sequences
(implicit_state_test.py)."""

from __future__ import annotations

import shutil

from triton_qa import models
from triton_qa.core import CPP_CLIENT, Check, Config, LeftOut, Run, Server, Suite, SuiteContext
from triton_qa.suites._common import fresh

GRPC_TESTS = [
    "test_grpc_async_infer",
    "test_grpc_stream_infer",
    "test_aio_grpc_async_infer",
    "test_aio_grpc_stream_infer",
    "test_grpc_async_infer_cancellation_at_step_start",
]


def _identity(name: str, max_batch_size: int, dtype: str, extra: str, delay_ms: int) -> str:
    return (
        f'name: "{name}"\nbackend: "identity"\nmax_batch_size: {max_batch_size}\n'
        f'input [{{ name: "INPUT0" \n data_type: {dtype} \n dims: [ -1 ] }}]\n'
        f'output [{{ name: "OUTPUT0" \n data_type: {dtype} \n dims: [ -1 ] }}]\n'
        f"{extra}"
        f'parameters [{{ key: "execute_delay_ms" \n value: {{ string_value: "{delay_ms}" }} }}]\n'
    )


def setup_grpc(ctx: SuiteContext) -> None:
    repo = fresh(ctx.path("models"))
    m = repo / "custom_identity_int32"
    (m / "1").mkdir(parents=True)
    models.config(m).write_text(
        _identity("custom_identity_int32", 1024, "TYPE_INT32", "instance_group [{ kind: KIND_CPU }]\n", 10000)
    )


def setup_scheduler(ctx: SuiteContext) -> None:
    repo = fresh(ctx.path("models"))
    one = "instance_group [{ count: 1 \n kind: KIND_CPU }]\n"
    specs = {
        "dynamic_batch": (2, one + "dynamic_batching { max_queue_delay_microseconds: 600000 }\n"),
        "sequence_direct": (
            1,
            one + "sequence_batching { direct { } \n max_sequence_idle_microseconds: 6000000 }\n",
        ),
        "sequence_oldest": (
            1,
            one + "sequence_batching { oldest { max_candidate_sequences: 1 } \n "
            "max_sequence_idle_microseconds: 6000000 }\n",
        ),
    }
    for name, (mbs, extra) in specs.items():
        (repo / name / "1").mkdir(parents=True)
        models.config(repo / name).write_text(_identity(name, mbs, "TYPE_FP32", extra, 6000))
    ens = repo / "ensemble_model"
    (ens / "1").mkdir(parents=True)
    models.config(ens).write_text(
        'name: "ensemble_model"\nplatform: "ensemble"\nmax_batch_size: 1\n'
        'input [{ name: "INPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]\n'
        'output [{ name: "OUTPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]\n'
        "ensemble_scheduling { step [\n"
        '{ model_name: "dynamic_batch" \n model_version: -1 \n input_map { key: "INPUT0" \n value: "INPUT0" } \n'
        ' output_map { key: "OUTPUT0" \n value: "out" } },\n'
        '{ model_name: "dynamic_batch" \n model_version: -1 \n input_map { key: "INPUT0" \n value: "out" } \n'
        ' output_map { key: "OUTPUT0" \n value: "OUTPUT0" } }\n'
        "] }\n"
    )


def setup_implicit(ctx: SuiteContext) -> None:
    repo = fresh(ctx.path("models"))
    (repo / "sequence_state" / "1").mkdir(parents=True)
    shutil.copy(ctx.path("implicit_state_model/config.pbtxt"), repo / "sequence_state" / "config.pbtxt")
    shutil.copy(ctx.path("implicit_state_model/model.pt"), repo / "sequence_state" / "1" / "model.pt")


def _cancellation_logged(ctx: SuiteContext, server: Server | None) -> str | None:
    text = ctx.server_log.read_text(errors="replace") if ctx.server_log else ""
    if "Cancellation notification received for" in text:
        return None
    return "the server log has no 'Cancellation notification received for' line (test.sh greps for it)"


def configs(ctx: SuiteContext) -> list[Config]:
    repo = f"--model-repository={ctx.work}/models"
    out = [
        Config(
            name=f"grpc-{test}",
            args=[repo, "--log-verbose=1"],
            setup=setup_grpc,
            env={"TRITONSERVER_DELAY_GRPC_PROCESS": "5000"} if test.endswith("at_step_start") else {},
            server_log=f"grpc_cancellation_test.{test}.server.log",
            steps=[
                Run("grpc_cancellation_test.py", [f"GrpcCancellationTest.{test}"]),
                Check("cancellation_logged", _cancellation_logged),
            ],
        )
        for test in GRPC_TESTS
    ]
    out.append(
        Config(
            name="scheduler_test",
            args=[repo, "--log-verbose=2"],
            setup=setup_scheduler,
            steps=[Run("scheduler_test.py")],
        )
    )
    out.append(
        Config(
            name="implicit_state_test",
            args=[repo, "--log-verbose=1"],
            setup=setup_implicit,
            steps=[Run("implicit_state_test.py")],
        )
    )
    return out


SUITE = Suite(
    name="L0_request_cancellation",
    configs=configs,
    left_out=[LeftOut("request_cancellation_test (C++ unit test of the in-process API)", CPP_CLIENT)],
    notes=["The `identity` C++ backend of every model but sequence_state is stood in for by a python model."],
)
