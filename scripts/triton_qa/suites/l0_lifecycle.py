"""qa/L0_lifecycle: server and model lifecycle (lifecycle_test.py), the sections of test.sh whose models are ONNX,
python or Triton's identity/sequence test backends (stood in for): repository errors without exiting, explicit
model control, reloads keeping a model available, config and file overrides, shutdown with requests in flight,
concurrent loads, load retries, new versions."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable

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
from triton_qa.suites import _http
from triton_qa.suites._common import fresh

LC = "lifecycle_test.py"
SLEEP_TIME = 10.0
Setup = Callable[[SuiteContext], None]


def _t(name: str, **kw) -> Run:  # type: ignore[no-untyped-def]
    return Run(LC, [f"LifeCycleTest.{name}"], **kw)


def _qa_model(ctx: SuiteContext, name: str, dest: str, target: str | None = None) -> None:
    shutil.copytree(ctx.data("qa_model_repository") / name, ctx.path(dest) / (target or name))


def _stand_in_files(ctx: SuiteContext) -> None:
    """The config.pbtxt.* files test.sh leaves for the tests to copy in: the identity backend stood in for."""
    for f in ctx.work.glob("config.pbtxt.*"):
        if re.search(r'backend:\s*"identity"', f.read_text()):
            models.stand_in_config(f, "identity")


def _python_identity(
    ctx: SuiteContext,
    dest: str,
    init_sleep: int | None = None,
    fini_sleep: int | None = None,
    config: bool = True,
) -> None:
    """../python_models/identity_fp32 with model.py in 1/ and a sleep appended to initialize or finalize."""
    target = ctx.path(dest)
    shutil.copytree(ctx.qa / "python_models" / "identity_fp32", target)
    (target / "1").mkdir()
    shutil.move(target / "model.py", target / "1" / "model.py")
    if init_sleep is not None:
        models.append(
            target / "1" / "model.py",
            f"    def initialize(self, args):\n        import time\n        time.sleep({init_sleep})",
        )
    if fini_sleep is not None:
        models.append(
            target / "1" / "model.py",
            f"    def finalize(self):\n        import time\n        time.sleep({fini_sleep})",
        )
    if not config:
        (target / "config.pbtxt").unlink()


def s_none(ctx: SuiteContext) -> None:
    fresh(ctx.path("models"))


def s_model_control(ensemble: bool, empty: bool = False) -> Setup:
    def setup(ctx: SuiteContext) -> None:
        fresh(ctx.path("models"))
        for f in ctx.work.glob("config.pbtxt.*"):
            f.unlink()
        _qa_model(ctx, "onnx_float32_float32_float32", "models")
        models.sed(
            ctx.path("models/onnx_float32_float32_float32/config.pbtxt"),
            r"max_batch_size:.*",
            "max_batch_size: 1",
        )
        if empty:
            for v in ctx.path("models/onnx_float32_float32_float32").iterdir():
                if v.is_dir():
                    for f in v.iterdir():
                        f.unlink()
        if ensemble:
            ens = (
                ctx.data("qa_ensemble_model_repository/qa_model_repository")
                / "simple_onnx_float32_float32_float32"
            )
            shutil.copytree(ens, ctx.path("models") / ens.name)
            models.sed(ctx.path(f"models/{ens.name}/config.pbtxt"), r"max_batch_size:.*", "max_batch_size: 1")

    return setup


def s_onnx_only(ctx: SuiteContext) -> None:
    s_model_control(False)(ctx)


def s_identity_reload(variant: int) -> Setup:
    def setup(ctx: SuiteContext) -> None:
        fresh(ctx.path("models"))
        for f in ctx.work.glob("config.pbtxt.*"):
            f.unlink()
        model = ctx.path("models/identity_zero_1_int32")
        shutil.copytree(ctx.path("identity_zero_1_int32"), model)
        (model / "1").mkdir(exist_ok=True)
        if variant in (2, 3):
            (model / "2").mkdir(exist_ok=True)
            models.append(model / "config.pbtxt", "version_policy: { specific { versions: [1] }}")
        if variant == 2:
            text = ctx.path("identity_zero_1_int32/config.pbtxt").read_text()
            ctx.path("config.pbtxt.v2").write_text(text + "version_policy: { specific { versions: [2] }}\n")
        if variant == 3:
            shutil.copy(model / "config.pbtxt", ctx.path("config.pbtxt.new"))
        _stand_in_files(ctx)

    return setup


def s_config_override(ctx: SuiteContext) -> None:
    fresh(ctx.path("models"))
    _qa_model(ctx, "onnx_float32_float32_float32", "models")
    for v in ("1", "3"):
        for f in ctx.path(f"models/onnx_float32_float32_float32/{v}").iterdir():
            f.unlink()


def s_file_override(ctx: SuiteContext) -> None:
    fresh(ctx.path("models"))
    _qa_model(ctx, "onnx_float32_float32_float32", "models")
    shutil.rmtree(ctx.path("models/onnx_float32_float32_float32/1"))


def _custom_zero(ctx: SuiteContext, extra: str) -> None:
    model = ctx.path("models/custom_zero_1_float32")
    shutil.copytree(ctx.qa / "custom_models" / "custom_zero_1_float32", model)
    (model / "1").mkdir(exist_ok=True)
    models.append(model / "config.pbtxt", extra)


def s_shutdown(kind: str) -> Setup:
    delay = (
        'dynamic_batching {}\nparameters [\n{ key: "execute_delay_ms"; value: { string_value: "5000" }}\n]'
    )

    def setup(ctx: SuiteContext) -> None:
        fresh(ctx.path("models"))
        if kind == "dynamic":
            _custom_zero(ctx, delay)
        elif kind == "sequence":
            shutil.copytree(
                ctx.qa / "custom_models" / "custom_sequence_int32", ctx.path("models/custom_sequence_int32")
            )
            ctx.path("models/custom_sequence_int32/1").mkdir(exist_ok=True)
        else:
            shutil.copytree(ctx.path("ensemble_zero_1_float32"), ctx.path("models/ensemble_zero_1_float32"))
            ctx.path("models/ensemble_zero_1_float32/1").mkdir(exist_ok=True)
            _custom_zero(ctx, delay)

    return setup


def s_concurrent_speedup(ctx: SuiteContext) -> None:
    fresh(ctx.path("models"))
    for suffix in ("_1", "_2"):
        m = ctx.path(f"models/identity_zero_1_int32{suffix}")
        shutil.copytree(ctx.path("identity_zero_1_int32"), m)
        (m / "1").mkdir(exist_ok=True)
        models.sed(m / "config.pbtxt", "identity_zero_1_int32", f"identity_zero_1_int32{suffix}")
        _python_identity(ctx, f"models/python_identity_fp32{suffix}", init_sleep=10)
        models.sed(
            ctx.path(f"models/python_identity_fp32{suffix}/config.pbtxt"),
            "identity_fp32",
            f"python_identity_fp32{suffix}",
        )


def s_concurrent_load(ctx: SuiteContext) -> None:
    fresh(ctx.path("models"))
    fresh(ctx.path("models_v2"))
    m = ctx.path("models/identity_model")
    shutil.copytree(ctx.path("identity_zero_1_int32"), m)
    (m / "1").mkdir()
    models.sed(m / "config.pbtxt", "identity_zero_1_int32", "identity_model")
    _python_identity(ctx, "models_v2/identity_model")
    models.sed(ctx.path("models_v2/identity_model/config.pbtxt"), "identity_fp32", "identity_model")
    models.translate_repositories([f"--model-repository={ctx.path('models_v2')}"], ctx.work)


def s_concurrent_load_unload(ctx: SuiteContext) -> None:
    fresh(ctx.path("models"))
    for name in ("identity_zero_1_int32", "ensemble_zero_1_float32"):
        shutil.copytree(ctx.path(name), ctx.path(f"models/{name}"))
        ctx.path(f"models/{name}/1").mkdir(exist_ok=True)
    _custom_zero(ctx, 'parameters [\n{ key: "creation_delay_sec"; value: { string_value: "10" }}\n]')


def s_stress(ctx: SuiteContext) -> None:
    fresh(ctx.path("models"))
    m = ctx.path("models/identity_zero_1_int32")
    shutil.copytree(ctx.path("identity_zero_1_int32"), m)
    (m / "1").mkdir()
    models.sed(m / "config.pbtxt", 'string_value: "10"', 'string_value: "0"')


def s_instance_speedup(ctx: SuiteContext) -> None:
    fresh(ctx.path("models"))
    _python_identity(ctx, "models/identity_fp32", init_sleep=10, config=False)


def s_instance_sanity(ctx: SuiteContext) -> None:
    fresh(ctx.path("models"))
    _python_identity(ctx, "models/python_float32_float32_float32", config=False)
    ctx.path("models/onnx_float32_float32_float32").mkdir()
    shutil.copytree(
        ctx.data("qa_model_repository") / "onnx_float32_float32_float32" / "1",
        ctx.path("models/onnx_float32_float32_float32/1"),
    )


def s_retry(ctx: SuiteContext) -> None:
    fresh(ctx.path("models"))
    shutil.copytree(ctx.path("retry_model"), ctx.path("models/retry_model"))


def s_config_overwrite(ctx: SuiteContext) -> None:
    fresh(ctx.path("models"))
    _python_identity(ctx, "models/identity_fp32", init_sleep=5, config=False)


def s_background_unloading(ctx: SuiteContext) -> None:
    fresh(ctx.path("models"))
    _python_identity(ctx, "models/identity_fp32", fini_sleep=10)


def s_while_loading(ctx: SuiteContext) -> None:
    fresh(ctx.path("models"))
    _python_identity(ctx, "models/identity_fp32", init_sleep=10)


def s_live_connection(ctx: SuiteContext) -> None:
    fresh(ctx.path("models"))
    target = ctx.path("models/add_sub")
    shutil.copytree(ctx.qa / "python_models" / "add_sub", target)
    (target / "1").mkdir()
    shutil.move(target / "model.py", target / "1" / "model.py")


def s_new_version(ctx: SuiteContext) -> None:
    fresh(ctx.path("models"))
    target = ctx.path("models/identity_fp32")
    shutil.copytree(ctx.qa / "python_models" / "identity_fp32", target)
    models.append(target / "config.pbtxt", "version_policy: { specific: { versions: [1, 2] } }")
    models.append(
        target / "model.py",
        "    def initialize(self, args):\n"
        "        pb_utils.Logger.log_info(f'[PB model] Loading version {args[\"model_version\"]}')",
    )
    for v in ("1", "2", "3"):
        (target / v).mkdir()
        shutil.copy(target / "model.py", target / v / "model.py")
    (target / "model.py").unlink()


def _log_count(text: str, op: str, n: int) -> Callable[[SuiteContext, Server | None], str | None]:
    def check(ctx: SuiteContext, server: Server | None) -> str | None:
        log = ctx.server_log.read_text(errors="replace") if ctx.server_log and ctx.server_log.exists() else ""
        got = log.count(text)
        ok = {"==": got == n, ">=": got >= n}[op]
        return None if ok else f"the server log has {got} of {text!r}; test.sh expects {op} {n}"

    return check


def _ready(model: str) -> Callable[[SuiteContext, Server | None], str | None]:
    def check(ctx: SuiteContext, server: Server | None) -> str | None:
        code, _body = _http.request("GET", f"/v2/models/{model}/ready")
        return None if code == 200 else f"GET /v2/models/{model}/ready answered {code}"

    return check


def _not_found(ctx: SuiteContext, server: Server | None) -> str | None:
    for path in ("/notapi/v2", "/v2/notapi", "/v2/models/notapi/foo"):
        code, _ = _http.request("GET", path)
        if code != 404:
            return f"GET {path} answered {code}; test.sh expects 404"
    return None


def configs(ctx: SuiteContext) -> list[Config]:
    models_ = f"--model-repository={ctx.work}/models"
    models_0 = f"--model-repository={ctx.work}/models_0"
    out: list[Config] = []
    # Repository errors, the server not exiting (run_server_nowait, then sleep).
    for name, args in (
        (
            "noexit-strict",
            ["--model-repository=/tmp/xyzx", "--strict-readiness=true", "--exit-on-error=false"],
        ),
        ("noexit", ["--model-repository=/tmp/xyzx", "--strict-readiness=false", "--exit-on-error=false"]),
        (
            "noexit-strict-two-repositories",
            ["--model-repository=/tmp/xyzx", models_, "--strict-readiness=true", "--exit-on-error=false"],
        ),
        (
            "noexit-two-repositories",
            [models_, "--model-repository=/tmp/xyzx", "--strict-readiness=false", "--exit-on-error=false"],
        ),
    ):
        out.append(
            Config(
                name=name,
                args=args,
                setup=s_none,
                start="nowait",
                settle=SLEEP_TIME,
                steps=[_t("test_parse_error_noexit")],
            )
        )
    explicit = [
        models_,
        "--model-control-mode=explicit",
        "--exit-timeout-secs=5",
        "--strict-model-config=false",
        "--strict-readiness=false",
    ]
    out.append(
        Config(
            name="model_control", args=explicit, setup=s_model_control(True), steps=[_t("test_model_control")]
        )
    )
    out.append(
        Config(
            name="model_control_fail",
            args=explicit,
            setup=s_model_control(False, empty=True),
            steps=[_t("test_model_control_fail")],
        )
    )
    out.append(
        Config(
            name="model_control_ensemble",
            args=explicit,
            setup=s_model_control(True),
            steps=[_t("test_model_control_ensemble")],
        )
    )
    out.append(
        Config(
            name="load-model-star-and-name",
            start="fail",
            setup=s_onnx_only,
            steps=[],
            start_timeout=60,
            args=[
                models_,
                models_0,
                "--model-control-mode=explicit",
                "--strict-readiness=true",
                "--exit-on-error=true",
                "--load-model=*",
                "--load-model=onnx_float32_float32_float32",
            ],
        )
    )
    out.append(
        Config(
            name="load-model-not-found",
            start="fail",
            setup=s_none,
            steps=[],
            start_timeout=60,
            args=[
                models_,
                "--model-control-mode=explicit",
                "--strict-readiness=true",
                "--exit-on-error=true",
                "--load-model=does-not-exist",
            ],
            after=[
                Check("log_model_not_found", _log_count("model not found in any model repository", ">=", 1))
            ],
        )
    )
    reload_args = [
        models_,
        "--model-control-mode=explicit",
        "--exit-timeout-secs=5",
        "--strict-model-config=false",
        "--load-model=identity_zero_1_int32",
        "--strict-readiness=false",
    ]
    for variant, test in (
        (1, "test_model_availability_on_reload"),
        (2, "test_model_availability_on_reload_2"),
        (3, "test_model_availability_on_reload_3"),
    ):
        for protocol in ("grpc", "http"):
            out.append(
                Config(
                    name=f"{test}-{protocol}",
                    args=reload_args,
                    setup=s_identity_reload(variant),
                    env={"TRITONSERVER_USE_GRPC": "1"} if protocol == "grpc" else {},
                    steps=[_t(test)],
                )
            )
    out.append(
        Config(
            name="unknown-apis-404",
            args=[models_, "--model-control-mode=none", "--exit-timeout-secs=5"],
            setup=s_onnx_only,
            steps=[Check("unknown_apis_answer_404", _not_found)],
        )
    )
    out.append(
        Config(
            name="config_override",
            setup=s_config_override,
            steps=[_t("test_config_override")],
            args=[models_, models_, "--model-control-mode=explicit", "--strict-model-config=false"],
        )
    )
    out.append(
        Config(
            name="file_override",
            setup=s_file_override,
            steps=[_t("test_file_override"), _t("test_file_override_security")],
            args=[
                models_,
                "--model-control-mode=explicit",
                "--load-model=onnx_float32_float32_float32",
                "--strict-model-config=false",
            ],
        )
    )
    verbose = [models_, "--log-verbose=1"]
    out.append(
        Config(
            name="shutdown_dynamic",
            args=verbose,
            setup=s_shutdown("dynamic"),
            steps=[_t("test_shutdown_dynamic")],
            after=[
                Check(
                    "in_flight_logged",
                    _log_count(
                        "Model 'custom_zero_1_float32' (version 1) has 1 in-flight inferences", ">=", 1
                    ),
                )
            ],
        )
    )
    out.append(
        Config(
            name="shutdown_sequence",
            args=verbose,
            setup=s_shutdown("sequence"),
            steps=[_t("test_shutdown_sequence")],
            after=[
                Check(
                    "in_flight_2_logged",
                    _log_count(
                        "Model 'custom_sequence_int32' (version 1) has 2 in-flight inferences", ">=", 1
                    ),
                ),
                Check(
                    "in_flight_1_logged",
                    _log_count(
                        "Model 'custom_sequence_int32' (version 1) has 1 in-flight inferences", ">=", 1
                    ),
                ),
            ],
        )
    )
    out.append(
        Config(
            name="shutdown_ensemble",
            args=verbose,
            setup=s_shutdown("ensemble"),
            steps=[_t("test_shutdown_ensemble")],
            after=[
                Check(
                    "in_flight_logged",
                    _log_count(
                        "Model 'ensemble_zero_1_float32' (version 1) has 1 in-flight inferences", ">=", 1
                    ),
                )
            ],
        )
    )
    explicit_only = [models_, "--model-control-mode=explicit"]
    out.append(
        Config(
            name="concurrent_model_load_speedup",
            args=explicit_only,
            setup=s_concurrent_speedup,
            steps=[_t("test_concurrent_model_load_speedup")],
        )
    )
    out.append(
        Config(
            name="concurrent_model_load",
            args=explicit_only,
            setup=s_concurrent_load,
            steps=[_t("test_concurrent_model_load")],
        )
    )
    out.append(
        Config(
            name="concurrent_model_load_unload",
            args=explicit_only,
            setup=s_concurrent_load_unload,
            steps=[_t("test_concurrent_model_load_unload")],
        )
    )
    out.append(
        Config(
            name="concurrent_same_model_load_unload_stress",
            setup=s_stress,
            args=[*explicit_only, "--model-load-thread-count=32", "--log-verbose=2"],
            steps=[_t("test_concurrent_same_model_load_unload_stress", timeout=900)],
            # 32 threads x 1024 loads and unloads: Triton's C++ identity backend loads in microseconds, the python
            # stand-in starts a stub process each time (about 0.2 s on 2 cores): hours.
            full_only=True,
        )
    )
    out.append(
        Config(
            name="concurrent_model_instance_load_speedup",
            args=explicit_only,
            setup=s_instance_speedup,
            steps=[_t("test_concurrent_model_instance_load_speedup")],
        )
    )
    out.append(
        Config(
            name="concurrent_model_instance_load_sanity",
            setup=s_instance_sanity,
            args=[*explicit_only, "--log-verbose=2"],
            env={"PARALLEL_BACKENDS": "python onnx"},
            steps=[_t("test_concurrent_model_instance_load_sanity")],
        )
    )
    out.append(
        Config(
            name="load_retry-without-retry",
            start="fail",
            setup=s_retry,
            steps=[],
            start_timeout=60,
            args=[models_, "--model-control-mode=none"],
        )
    )
    out.append(
        Config(
            name="load_retry-with-retry",
            setup=s_retry,
            args=[models_, "--model-control-mode=none", "--model-load-retry-count=1"],
            steps=[Check("retry_model_ready", _ready("retry_model"))],
        )
    )
    out.append(
        Config(
            name="model_config_overwite",
            setup=s_config_overwrite,
            args=[*explicit_only, "--load-model", "identity_fp32"],
            steps=[_t("test_model_config_overwite")],
        )
    )
    out.append(
        Config(
            name="shutdown_while_background_unloading",
            setup=s_background_unloading,
            args=[*explicit_only, "--load-model", "identity_fp32", "--log-verbose=2"],
            steps=[_t("test_shutdown_while_background_unloading")],
            after=[Check("two_models_unloaded", _log_count("successfully unloaded", "==", 2))],
        )
    )
    out.append(
        Config(
            name="shutdown_while_loading",
            setup=s_while_loading,
            args=[*explicit_only, "--log-verbose=2"],
            steps=[_t("test_shutdown_while_loading")],
        )
    )
    out.append(
        Config(
            name="shutdown_with_live_connection",
            setup=s_live_connection,
            args=[models_],
            steps=[_t("test_shutdown_with_live_connection")],
        )
    )
    out.append(
        Config(
            name="load_new_model_version",
            setup=s_new_version,
            args=[*explicit_only, "--load-model=*"],
            env={"PYTHONDONTWRITEBYTECODE": "True"},
            steps=[_t("test_load_new_model_version")],
        )
    )
    return out


SUITE = Suite(
    name="L0_lifecycle",
    configs=configs,
    left_out=[
        LeftOut(
            "the sections on graphdef and savedmodel models (parse and init errors of models, version policies, "
            "polling, multiple repositories, model modify/delete, repository index, custom configs)",
            TENSORFLOW,
        ),
        LeftOut("the sections with plan models (load_same_model_different_platform, ...)", TENSORRT),
        LeftOut("test_model_reload_fail (a KIND_GPU version) and test_load_gpu_limit", GPU),
        LeftOut(
            "the port-in-use checks (a second server on the first's ports) and the AsyncUnload()/OnLoadFinal() "
            "order in the log (Triton's internal function names)",
            OTHER,
            "not reproduced",
        ),
    ],
    notes=[
        "The `identity` and `sequence` C++ backends (identity_zero_1_int32, custom_zero_1_float32, "
        "custom_sequence_int32, the steps of ensemble_zero_1_float32) are stood in for by python models, also in "
        "the config.pbtxt.* files the tests copy in.",
        "Without --full: concurrent_same_model_load_unload_stress (32 x 1024 loads and unloads of the python "
        "stand-in, which starts a stub process each time: hours on 2 cores).",
    ],
)
