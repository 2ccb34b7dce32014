"""Runs suites: for each configuration, its model repository, modelhost started with its flags, its tests,
and the server stopped, whatever happens."""

from __future__ import annotations

import fnmatch
import re
import shutil
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from triton_qa import models
from triton_qa.core import (
    RUNTIME,
    Check,
    Config,
    ConfigResult,
    LeftOut,
    Run,
    Server,
    Suite,
    SuiteContext,
    SuiteResult,
    TestResult,
    apply_known,
    base_env,
    install_client,
    install_pydeps,
    list_tests,
    log_tail,
    prepare_work,
    run_tests,
    stand_in_backends,
)

# Flags added to every server start, each a translation of a tritonserver 2.51 default modelhost does not
# share (said in the summary).
TRANSLATIONS: list[tuple[str, str]] = [
    (
        "--allow-client-shm=true",
        "tritonserver 2.51 always serves client shared memory; modelhost only with --allow-client-shm=true",
    ),
]


def translate_args(args: Sequence[str]) -> list[str]:
    out = list(args)
    for flag, _why in TRANSLATIONS:
        name = flag.split("=", 1)[0]
        if not any(a == name or a.startswith(name + "=") for a in out):
            out.append(flag)
    return out


def with_stand_in_backends(args: Sequence[str], backends: Path) -> list[str]:
    """The server's --backend-directory made the folder of stand-in backends (any given one dropped)."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--backend-directory":
            skip = True
        elif not arg.startswith("--backend-directory="):
            out.append(arg)
    return [*out, f"--backend-directory={backends}"]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:80] or "config"


def _tests_of(ctx: SuiteContext, steps: Sequence[Run | Check], env: dict[str, str]) -> list[str]:
    ids: list[str] = []
    for step in steps:
        if isinstance(step, Run):
            ids += list_tests(ctx, step, env)
        else:
            ids.append(f"check.{step.name}")
    return ids


def _check(ctx: SuiteContext, check: Check, server: Server | None) -> TestResult:
    try:
        msg = check.fn(ctx, server)
    except Exception:
        msg = "the check raised:\n" + traceback.format_exc(limit=3)
    return TestResult(f"check.{check.name}", "passed" if msg is None else "failed", msg or "")


def run_config(ctx: SuiteContext, suite: Suite, cfg: Config, index: int) -> ConfigResult:
    started = time.monotonic()
    logdir = ctx.logs / f"{index:02d}-{_slug(cfg.name)}"
    logdir.mkdir(parents=True, exist_ok=True)
    server_log = ctx.work / cfg.server_log if cfg.server_log else logdir / "server.log"
    client_log = logdir / "client.log"
    server_log.unlink(missing_ok=True)
    client_log.unlink(missing_ok=True)
    ctx.server_log = server_log
    ctx.config = cfg.name
    env = base_env(ctx)
    env.update(cfg.env)
    env["SERVER_LOG"] = str(server_log)
    # Triton's C++ test backends, which config overrides name, as python-based backends of the same behaviour.
    backends = stand_in_backends(ctx)
    env["TRITON_QA_BACKENDS"] = str(backends)
    args = with_stand_in_backends(translate_args(cfg.args), backends)
    result = ConfigResult(suite.name, cfg.name, args, server_log=str(server_log))
    ctx.log(f"  [{cfg.name}] {' '.join(args)}")

    def finish() -> ConfigResult:
        result.results = apply_known(result.results, cfg.known, cfg.suspect)
        result.seconds = time.monotonic() - started
        c = result.counts()
        summary = ", ".join(f"{v} {k}" for k, v in c.items() if v)
        ctx.log(
            f"    -> {summary or 'no tests'} ({result.seconds:.0f}s){' ' + result.note if result.note else ''}"
        )
        return result

    if cfg.setup is not None:
        try:
            cfg.setup(ctx)
        except Exception:
            msg = "setting up the configuration failed:\n" + traceback.format_exc(limit=4)
            result.note = "setup failed"
            result.results = [
                TestResult(t, "errored", msg) for t in _tests_of(ctx, [*cfg.steps, *cfg.after], env)
            ]
            return finish()

    if cfg.translate_models:
        models.translate_repositories(args, ctx.work)
    server: Server | None = None
    try:
        if cfg.start != "none":
            server = Server(ctx, args, env, server_log, cfg.server_cwd)
            server.launch()
            env["SERVER_PID"] = str(server.pid)
            if cfg.start == "fail":
                # The server must not come up: it exits, or at least never becomes ready.
                err = server.wait("ready", cfg.start_timeout)
                ok = err is not None
                msg = "" if ok else "the server started and became ready; test.sh expects it to fail"
                result.results.append(
                    TestResult("check.server_fails_to_start", "passed" if ok else "failed", msg)
                )
            elif cfg.start in ("ready", "live"):
                err = server.wait(cfg.start, cfg.start_timeout)
                if err is not None:
                    tail = log_tail(server_log, 20)
                    ids = _tests_of(ctx, [*cfg.steps, *cfg.after], env)
                    if cfg.unsupported:
                        result.note = f"server refused: {cfg.unsupported}"
                        result.results = [
                            TestResult(t, "known", f"server did not start ({err})\n{tail}", cfg.unsupported)
                            for t in ids
                        ]
                    else:
                        result.note = f"server did not start: {err}"
                        result.results = [
                            TestResult(t, "errored", f"server did not start ({err})\n{tail}") for t in ids
                        ]
                    return finish()
        if cfg.start == "nowait" and cfg.settle:
            time.sleep(cfg.settle)
        for n, step in enumerate(cfg.steps):
            if isinstance(step, Run):
                tag = f"{logdir.name}-{n}-{Path(step.file).stem}"
                result.results += run_tests(ctx, step, env, client_log, tag)
            else:
                result.results.append(_check(ctx, step, server))
        if server is not None and cfg.start in ("ready", "live") and not server.alive():
            result.note = (result.note + "; " if result.note else "") + (
                f"the server exited (status {server.proc.returncode if server.proc else '?'}) during the tests"
            )
    finally:
        if server is not None:
            server.stop(cfg.stop_timeout)
        if cfg.server_log and server_log.exists():
            shutil.copy(server_log, logdir / "server.log")
    for check in cfg.after:
        result.results.append(_check(ctx, check, server))
    return finish()


def run_suite(
    suite: Suite,
    triton: Path,
    out: Path,
    cache: Path,
    python: str,
    config_filter: str | None = None,
    full: bool = False,
    log: Callable[[str], None] = print,
    client: str = "",
) -> SuiteResult:
    """`client`: the tritonclient version the tests use ("": the installed one)."""
    started = time.monotonic()
    result = SuiteResult(suite.name, left_out=list(suite.left_out), notes=list(suite.notes))
    qa_dir = suite.qa_dir or suite.name
    work = prepare_work(triton, out / "work", qa_dir)
    logs = out / "logs" / suite.name
    ctx = SuiteContext(
        triton=triton, qa=out / "work" / "qa", work=work, cache=cache, logs=logs, python=python, log=log
    )
    log(f"== {suite.name}")
    if client:
        ctx.client = install_client(ctx, client)
        if ctx.client is None:
            result.notes.append(
                f"tritonclient {client} could not be installed: the tests used the installed one"
            )
    if suite.pip:
        failed = install_pydeps(ctx, suite.pip)
        if failed:
            result.notes.append(
                f"pip install failed for {', '.join(failed)}: the tests that import them error"
            )
    try:
        configs = suite.configs(ctx)
    except Exception:
        result.error = "building the configurations failed:\n" + traceback.format_exc(limit=5)
        log(result.error)
        return result
    skipped_for_time: list[str] = []
    for i, cfg in enumerate(configs):
        if config_filter and not fnmatch.fnmatchcase(cfg.name, config_filter):
            continue
        if cfg.full_only and not full:
            skipped_for_time.append(cfg.name)
            continue
        try:
            result.configs.append(run_config(ctx, suite, cfg, i))
        except Exception:
            err = traceback.format_exc(limit=5)
            log(f"    configuration {cfg.name} failed in the runner:\n{err}")
            result.configs.append(
                ConfigResult(
                    suite.name,
                    cfg.name,
                    list(cfg.args),
                    [TestResult(f"{cfg.name}.<runner>", "errored", "runner error:\n" + err)],
                    note="runner error",
                )
            )
    if skipped_for_time:
        result.left_out.append(
            LeftOut(
                f"{len(skipped_for_time)} configurations: {', '.join(skipped_for_time)}",
                RUNTIME,
                "variants of configurations that run; --full runs them",
            )
        )
    result.seconds = time.monotonic() - started
    return result
