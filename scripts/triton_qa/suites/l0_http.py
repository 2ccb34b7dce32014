"""qa/L0_http, its python tests: python_http_aio_test.py (the asyncio HTTP client), http_test.py (HTTP details on
ONNX identity models) and generate_endpoint_test.py (the generate extension)."""

from __future__ import annotations

import shutil
from pathlib import Path

from triton_qa import models
from triton_qa.core import CPP_CLIENT, OTHER, Check, Config, LeftOut, Run, Server, Suite, SuiteContext
from triton_qa.suites._common import fresh

# modelhost's bundled example: the ONNX twin of docs/examples/model_repository/simple (a TF graphdef).
EXAMPLES = Path(__file__).resolve().parents[3] / "src" / "modelhost" / "examples"


# The other models Triton's QA image puts in L0_http/models (docs/examples/model_repository and the
# simple_string_dyna_sequence test.sh makes): TensorFlow models, present here as loadable placeholders (the
# python tests run here use only `simple`; the repository index counts them all).
PLACEHOLDERS = [
    "simple_dyna_sequence",
    "simple_identity",
    "simple_sequence",
    "simple_string",
    "inception_graphdef",
    "simple_string_dyna_sequence",
]


def setup_models(ctx: SuiteContext) -> None:
    repo = fresh(ctx.path("models"))
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    for name in PLACEHOLDERS:
        (repo / name / "1").mkdir(parents=True)
        models.config(repo / name).write_text(
            f'name: "{name}"\nbackend: "identity"\nmax_batch_size: 8\n'
            'input [{ name: "INPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]\n'
            'output [{ name: "OUTPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]\n'
        )


def setup_unit(ctx: SuiteContext) -> None:
    repo = fresh(ctx.path("python_unit_test_models"))
    models.copy_models(
        ctx.data("qa_identity_model_repository"),
        repo,
        ["onnx_zero_1_float32", "onnx_zero_1_object", "onnx_zero_1_float16", "onnx_zero_3_float32"],
    )
    one = repo / "onnx_zero_1_object_1_element"
    shutil.copytree(repo / "onnx_zero_1_object", one)
    models.sed(models.config(one), "onnx_zero_1_object", "onnx_zero_1_object_1_element")
    models.sed(models.config(one), "-1", "1", count=1)
    queue = repo / "onnx_zero_1_float32_queue"
    shutil.copytree(repo / "onnx_zero_1_float32", queue)
    models.sed(models.config(queue), "onnx_zero_1_float32", "onnx_zero_1_float32_queue")
    models.append(
        models.config(queue),
        "dynamic_batching { \n    max_queue_delay_microseconds: 1000000\n    preferred_batch_size: [ 8 ]\n"
        "    default_queue_policy {\n        max_queue_size: 1\n    }\n}",
    )


def configs(ctx: SuiteContext) -> list[Config]:
    return [
        Config(
            name="python_http_aio_test",
            args=["--backend-directory=/opt/tritonserver/backends", f"--model-repository={ctx.work}/models"],
            setup=setup_models,
            steps=[Run("python_http_aio_test.py")],
        ),
        Config(
            name="http_test",
            args=[
                "--backend-directory=/opt/tritonserver/backends",
                "--model-repository=python_unit_test_models",
            ],
            setup=setup_unit,
            steps=[Run("http_test.py")],
        ),
        Config(
            name="generate_endpoint_test",
            args=[f"--model-repository={ctx.work}/generate_models"],
            steps=[Run("generate_endpoint_test.py")],
        ),
        # test.sh's "Test Restricted APIs": a category in two values, an unknown category, then the tests.
        Config(
            name="restricted_api_repeated",
            args=[
                f"--model-repository={ctx.work}/models",
                "--http-restricted-api=model-repository,health:k1=v1",
                "--http-restricted-api=metadata,health:k2=v2",
            ],
            setup=setup_models,
            start="fail",
            steps=[],
            after=[
                Check(
                    "log_has_repeated",
                    _log_has("api 'health' can not be specified in multiple config groups"),
                )
            ],
        ),
        Config(
            name="restricted_api_unknown",
            args=[
                f"--model-repository={ctx.work}/models",
                "--http-restricted-api=model-reposit,health:k1=v1",
                "--http-restricted-api=metadata,health:k2=v2",
            ],
            setup=setup_models,
            start="fail",
            steps=[],
            after=[Check("log_has_unknown", _log_has("unknown restricted api 'model-reposit'"))],
        ),
        Config(
            name="restricted_api",
            args=[
                f"--model-repository={ctx.work}/models",
                "--http-restricted-api=model-repository:admin-key=admin-value",
                "--http-restricted-api=inference,metadata:infer-key=infer-value",
            ],
            setup=setup_models,
            steps=[Run("http_restricted_api_test.py", args=["RestrictedAPITest"])],
        ),
    ]


def _log_has(text: str):  # type: ignore[no-untyped-def]
    def check(ctx: SuiteContext, server: Server | None) -> str | None:
        log = ctx.server_log.read_text(errors="replace") if ctx.server_log and ctx.server_log.exists() else ""
        return None if text in log else f"the server log has no {text!r} (test.sh greps for it)"

    return check


SUITE = Suite(
    name="L0_http",
    configs=configs,
    pip=["sseclient-py"],
    left_out=[
        LeftOut(
            "Triton's example clients (qa/clients: C++ and python simple_http_* clients, image client)",
            CPP_CLIENT,
            "not in the server repository",
        ),
        LeftOut(
            "http_client_plugin_test.py, http_basic_auth_test.py (nginx)", OTHER, "not in the brief's list"
        ),
        LeftOut(
            "the curl checks of binary_data / JSON outputs and of malformed requests", OTHER, "not reproduced"
        ),
    ],
    notes=[
        "docs/examples/model_repository/simple (a TensorFlow graphdef) is stood in for by modelhost's bundled ONNX "
        "`simple` (same inputs, outputs and arithmetic); the six other models of Triton's L0_http/models "
        f"({', '.join(PLACEHOLDERS)}) are loadable identity placeholders with their names.",
        "sseclient-py, which test.sh pip-installs, is installed into the runner's cache.",
    ],
)
