"""qa/L0_client_timeout: client-side timeouts of the python clients on inference (a model that takes 3 s) and on
every other API (TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC=2 delays the server's gRPC answers)."""

from __future__ import annotations

from triton_qa.core import CPP_CLIENT, Config, LeftOut, Run, Suite, SuiteContext

INFER_TESTS = [
    "test_grpc_infer",
    "test_grpc_async_infer",
    "test_grpc_stream_infer",
    "test_http_infer",
    "test_http_async_infer",
]


def setup(ctx: SuiteContext) -> None:
    ctx.path("models/custom_identity_int32/1").mkdir(parents=True, exist_ok=True)


def configs(ctx: SuiteContext) -> list[Config]:
    repo = f"--model-repository={ctx.work}/models"
    return [
        Config(
            name="infer-timeouts",
            args=[repo, "--log-verbose", "2"],
            setup=setup,
            # test.sh runs each test in a process of its own, against one server.
            steps=[Run("client_infer_timeout_test.py", [f"ClientInferTimeoutTest.{t}"]) for t in INFER_TESTS],
        ),
        Config(
            name="non-infer-timeouts",
            args=[
                repo,
                "--log-verbose",
                "2",
                "--model-control-mode=explicit",
                "--load-model=custom_identity_int32",
                "--log-verbose",
                "2",
            ],
            setup=setup,
            env={"TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC": "2"},
            steps=[
                Run(
                    "client_non_infer_timeout_test.py",
                    skip={"*cuda_shared_memory*": "needs a GPU (CUDA shared memory, cuda-python)"},
                )
            ],
        ),
    ]


SUITE = Suite(
    name="L0_client_timeout",
    configs=configs,
    left_out=[
        LeftOut(
            "client_timeout_test (C++ client: gRPC non-infer APIs, infer, async, streaming, HTTP)", CPP_CLIENT
        )
    ],
    notes=["The `identity` C++ backend of custom_identity_int32 is stood in for by a python model."],
)
