"""qa/L0_logging: the --log-* flags and the logging extension (GET/POST /v2/logging) checked as test.sh does
with curl, the simple clients and grep on the log file; logging_endpoint_test.py; log_format_test.py (which
starts `tritonserver` itself: the runner's `tritonserver` on PATH runs modelhost)."""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable

from triton_qa import models
from triton_qa.core import CPP_CLIENT, Check, Config, LeftOut, Run, Server, Suite, SuiteContext
from triton_qa.suites import _http
from triton_qa.suites._common import fresh

MODELS = "log_models"
LINE = re.compile(r"^[IWEV][0-9]{4}.*", re.MULTILINE)
CheckFn = Callable[[SuiteContext, Server | None], str | None]


def setup(ctx: SuiteContext) -> None:
    repo = ctx.path(MODELS)
    if (repo / "simple").exists():
        return
    simple = fresh(repo) / "simple"
    shutil.copytree(ctx.data("qa_model_repository") / "onnx_int32_int32_int32", simple)
    for v in ("2", "3"):
        shutil.rmtree(simple / v)
    models.sed(models.config(simple), r"^name:.*", 'name: "simple"')


def _settings(file: str, info: bool, warn: bool, error: bool, verbose: int, fmt: str) -> str | None:
    code, body = _http.request("GET", "/v2/logging")
    if code != 200:
        return f"GET /v2/logging answered {code}: {body[:200]}"
    return _http.expect_fields(
        body,
        {
            "log_file": file,
            "log_info": info,
            "log_warning": warn,
            "log_error": error,
            "log_verbose_level": verbose,
            "log_format": fmt,
        },
    )


def _file_lines(ctx: SuiteContext, name: str) -> list[str]:
    path = ctx.path(name)
    return LINE.findall(path.read_text(errors="replace")) if path.exists() else []


def _server_console(ctx: SuiteContext) -> str:
    return ctx.server_log.read_text(errors="replace") if ctx.server_log and ctx.server_log.exists() else ""


def _all(*fns: CheckFn) -> CheckFn:
    def check(ctx: SuiteContext, server: Server | None) -> str | None:
        for fn in fns:
            msg = fn(ctx, server)
            if msg:
                return msg
        return None

    return check


def settings(file: str, info: bool, warn: bool, error: bool, verbose: int, fmt: str = "default") -> CheckFn:
    return lambda ctx, server: _settings(file, info, warn, error, verbose, fmt)


def get_settings(ctx: SuiteContext, server: Server | None) -> str | None:
    """test.sh's bare `curl localhost:8000/v2/logging` (its answer unchecked; the request counts in the log)."""
    code, body = _http.request("GET", "/v2/logging")
    return None if code == 200 else f"GET /v2/logging answered {code}: {body[:200]}"


def infer(ctx: SuiteContext, server: Server | None) -> str | None:
    return _http.simple_infer("simple")


def post(body: dict[str, object], expect_ok: bool, expect_error: str | None = None) -> CheckFn:
    def check(ctx: SuiteContext, server: Server | None) -> str | None:
        code, text = _http.request("POST", "/v2/logging", json.dumps(body))
        if expect_ok and code != 200:
            return f"POST /v2/logging {body} answered {code}: {text[:200]}"
        if not expect_ok and code == 200:
            return f"POST /v2/logging {body} answered 200; test.sh expects a refusal"
        if expect_error and expect_error not in text:
            return f"POST /v2/logging {body}: expected the error {expect_error!r}, got {text[:200]}"
        return None

    return check


def post_raw(raw: str, expect_ok: bool) -> CheckFn:
    def check(ctx: SuiteContext, server: Server | None) -> str | None:
        code, _text = _http.request("POST", "/v2/logging", raw)
        if (code == 200) != expect_ok:
            return f"POST /v2/logging {raw} answered {code}; test.sh expects {'200' if expect_ok else 'a refusal'}"
        return None

    return check


def count_in_file(name: str, text: str, op: str, n: int) -> CheckFn:
    def check(ctx: SuiteContext, server: Server | None) -> str | None:
        path = ctx.path(name)
        got = path.read_text(errors="replace").count(text) if path.exists() else 0
        ok = {"==": got == n, "<=": got <= n, ">=": got >= n}[op]
        return None if ok else f"{name} has {got} occurrences of {text!r}; test.sh expects {op} {n}"

    return check


def lines_in_file(name: str, minimum: int) -> CheckFn:
    def check(ctx: SuiteContext, server: Server | None) -> str | None:
        got = len(_file_lines(ctx, name))
        return None if got >= minimum else f"{name} has {got} log lines; test.sh expects at least {minimum}"

    return check


def console_lines(op: str, n: int) -> CheckFn:
    def check(ctx: SuiteContext, server: Server | None) -> str | None:
        text = _server_console(ctx)
        got = len(LINE.findall(text)) if op == "<=" else len(text.splitlines())
        ok = got <= n if op == "<=" else got > n
        what = "log lines" if op == "<=" else "lines"
        return None if ok else f"the server's console output has {got} {what}; test.sh expects {op} {n}"

    return check


def first_line_date(name: str, default_format: bool, last: bool = False) -> CheckFn:
    def check(ctx: SuiteContext, server: Server | None) -> str | None:
        path = ctx.path(name)
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        if not lines:
            return f"{name} is empty"
        line = lines[-1] if last else lines[0]
        head = line.split(" ", 1)[0]
        expected = "I" + time.strftime("%m%d")
        if (head == expected) != default_format:
            fmt = "default" if default_format else "ISO8601"
            return f"{'last' if last else 'first'} line of {name} is not in the {fmt} format: {line[:120]}"
        return None

    return check


def _remove(name: str):  # type: ignore[no-untyped-def]
    def fn(ctx: SuiteContext) -> None:
        setup(ctx)
        ctx.path(name).unlink(missing_ok=True)

    return fn


def configs(ctx: SuiteContext) -> list[Config]:
    repo = f"--model-repository={ctx.work}/{MODELS}"
    out = [
        Config(
            name="default",
            args=[repo],
            setup=setup,
            steps=[
                Check("settings", settings("", True, True, True, 0)),
                Check("simple_clients", infer),
                Check("console_has_more_than_30_lines", console_lines(">", 30)),
            ],
        ),
        Config(
            name="log-file",
            args=["--log-file=log_file.log", repo],
            setup=_remove("log_file.log"),
            steps=[
                Check("settings", settings("log_file.log", True, True, True, 0)),
                Check("simple_clients", infer),
            ],
            after=[
                Check("log_file_has_19_lines", lines_in_file("log_file.log", 19)),
                Check("console_has_no_log_lines", console_lines("<=", 0)),
            ],
        ),
        Config(
            name="log-file-verbose",
            args=["--log-file=log_file.log", "--log-verbose=1", repo],
            setup=_remove("log_file.log"),
            steps=[
                Check(
                    "log_file_not_updatable",
                    post(
                        {"log_file": "other_log.log"},
                        False,
                        "log file location can not be updated through network protocol",
                    ),
                ),
                Check("settings", settings("log_file.log", True, True, True, 1)),
                Check("simple_clients", infer),
            ],
            after=[
                Check("log_file_has_75_lines", lines_in_file("log_file.log", 75)),
                Check("console_has_no_log_lines", console_lines("<=", 0)),
            ],
        ),
        Config(
            name="log-info-false",
            args=["--log-file=log_file.log", "--log-info=false", "--log-verbose=1", repo],
            setup=_remove("log_file.log"),
            steps=[
                Check("settings", settings("log_file.log", False, True, True, 1)),
                Check("simple_clients", infer),
                Check(
                    "no_started_httpservice", count_in_file("log_file.log", "Started HTTPService at", "==", 0)
                ),
                Check(
                    "enable_log_info",
                    _all(post({"log_info": True}, True), settings("log_file.log", True, True, True, 1)),
                ),
                Check("simple_clients_again", infer),
            ],
            after=[
                Check(
                    "waiting_for_in_flight_logged_once",
                    count_in_file("log_file.log", "Waiting for in-flight requests to complete", "==", 1),
                )
            ],
        ),
        Config(
            name="log-warning-false",
            args=["--log-warning=false", repo],
            setup=setup,
            steps=[Check("settings", settings("", True, False, True, 0)), Check("simple_clients", infer)],
        ),
        Config(
            name="log-error-false",
            args=["--log-error=false", repo],
            setup=setup,
            steps=[Check("settings", settings("", True, True, False, 0)), Check("simple_clients", infer)],
        ),
        Config(
            name="log-verbose",
            args=["--log-file=log_file.log", "--log-verbose=1", repo],
            setup=_remove("log_file.log"),
            steps=[
                Check("settings", _all(get_settings, settings("log_file.log", True, True, True, 1))),
                Check("simple_clients", infer),
                Check("logging_requests_logged", count_in_file("log_file.log", "/v2/logging", "==", 2)),
                Check(
                    "verbose_off",
                    _all(post({"log_verbose_level": 0}, True), settings("log_file.log", True, True, True, 0)),
                ),
                Check(
                    "logging_requests_not_logged",
                    _all(
                        settings("log_file.log", True, True, True, 0),
                        count_in_file("log_file.log", "/v2/logging", "<=", 3),
                    ),
                ),
            ],
        ),
        Config(
            name="log-format-ISO8601",
            args=["--log-file=log_file.log", "--log-verbose=1", "--log-format=ISO8601", repo],
            setup=_remove("log_file.log"),
            steps=[
                Check("settings", settings("log_file.log", True, True, True, 1, "ISO8601")),
                Check("simple_clients", infer),
                Check("first_line_iso8601", first_line_date("log_file.log", default_format=False)),
                Check(
                    "switch_to_default",
                    _all(
                        post({"log_format": "default"}, True),
                        settings("log_file.log", True, True, True, 1, "default"),
                        first_line_date("log_file.log", default_format=True, last=True),
                    ),
                ),
            ],
        ),
        Config(
            name="invalid-settings",
            args=["--log-warn=false", repo],
            setup=setup,
            steps=[
                *(
                    Check(
                        f"{param}_types",
                        _all(
                            post_raw(f'{{"{param}":1}}', False),
                            post_raw(f'{{"{param}":False}}', False),
                            post_raw(f'{{"{param}":"false"}}', False),
                            post_raw(f'{{"{param}":true}}', True),
                        ),
                    )
                    for param in ("log_info", "log_warning", "log_error")
                ),
                Check(
                    "log_verbose_level_types",
                    _all(
                        post_raw('{"log_verbose_level":-1}', False),
                        post_raw('{"log_verbose_level":"1"}', False),
                        post_raw('{"log_verbose_level":0}', True),
                    ),
                ),
            ],
        ),
        Config(
            name="logging_endpoint_test", args=[repo], setup=setup, steps=[Run("logging_endpoint_test.py")]
        ),
        Config(
            name="log_format_test",
            args=[],
            start="none",
            setup=setup,
            steps=[Run("log_format_test.py", pytest=True, timeout=1800)],
        ),
    ]
    return out


SUITE = Suite(
    name="L0_logging",
    configs=configs,
    left_out=[
        LeftOut(
            "simple_http_infer_client / simple_grpc_infer_client (C++)",
            CPP_CLIENT,
            "the same requests are made with tritonclient",
        )
    ],
    notes=[
        "log_format_test.py starts `tritonserver` from PATH: the runner puts a `tritonserver` there that runs "
        "`python -m modelhost serve`.",
    ],
)
