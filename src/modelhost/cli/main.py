"""The `modelhost` command: `modelhost serve` takes tritonserver's flags, in tritonserver's forms.

Every tritonserver flag is known here, in one table (FLAGS) from which the parser, `--help`, docs/cli.md and
the tests all derive. Each flag is one of:

    honoured           it does what it does in tritonserver;
    ignored            accepted, logged at startup as ignored: it has no meaning in modelhost's design
                       (backend directories, thread-pool sizes of a C++ server);
    not supported yet  refused with exit code 2, never silently dropped, except for the values that describe
                       what modelhost does anyway (--allow-sagemaker=false, --model-control-mode=none, ...).

Bools take true/false, on/off, 1/0 in any case; values come as `--flag=value` or `--flag value`; a flag given
twice keeps its last value unless it is repeatable.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import modelhost
from modelhost.cli.flags import (
    FLAGS,
    FLAGS_BY_NAME,
    METAVARS,
    SECTIONS,
    Flag,
    Status,
    int_or_none,
)
from modelhost.frontends.restrictions import GRPC_HEADER_PREFIX, Restrictions, add_restriction
from modelhost.frontends.vertex_ai.settings import VertexAiSettingsError, vertex_ai_defaults
from modelhost.host.devices import cpu_count
from modelhost.observability.logs import LOGGER_NAME, configure_logging
from modelhost.options import (
    ServerOptions,
    auto_frontend_processes,
    bool_or_none,
    parse_address,
)

log = logging.getLogger(f"{LOGGER_NAME}.cli")

USAGE_ERROR = 2  # bad command line, as argparse and most CLIs


class CliError(Exception):
    """A command line modelhost refuses; main() prints it and exits with USAGE_ERROR."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


# --backend-config values: (backend ("" = global), setting, value)
BackendSetting = tuple[str, str, str]
# Messages for the log, kept until logging is configured: (level, message)
Note = tuple[int, str]


def bundled_examples() -> Path:
    """The example model repository shipped inside the package, served when no repository is given."""
    return Path(modelhost.__file__).parent / "examples"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(args)
    except CliError as error:
        print(f"modelhost: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        return 130  # 128 + SIGINT, as shells report it


def tritonserver_main(argv: Sequence[str] | None = None) -> int:
    """The `tritonserver` command installed with modelhost: tritonserver's command line unchanged, so that a
    manifest, script or runtime that calls `tritonserver --model-repository=...` runs modelhost once the image
    is swapped. It is `modelhost serve`, less the bundled examples: as tritonserver, no repository is an
    error."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return _serve(args, require_repository=True)
    except CliError as error:
        print(f"tritonserver: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        return 130


def _main(args: list[str]) -> int:
    if args and args[0] == "serve":
        return _serve(args[1:])
    if args and args[0] == "sagemaker":
        from modelhost.cli.sagemaker import main as sagemaker_main  # the SageMaker container's `serve`

        return sagemaker_main(args[1:], lambda serve_args: _main(["serve", *serve_args]))
    if args and args[0] == "perf":
        from modelhost.perf import main as perf_main  # perf_analyzer's job; none of the server

        return perf_main(args[1:])
    if args and args[0] == "tune":
        from modelhost.tune import main as tune_main  # Model Analyzer's job, on perf's load engine

        return tune_main(args[1:])
    if args and args[0] == "convert":
        return _convert_model(args[1:])
    if args and args[0] == "ray":
        from modelhost.cli.ray import main as ray_main  # a repository on a Ray cluster (docs/ray.md)

        return ray_main(args[1:])
    if args and args[0] == "compatibility":
        return _compatibility(args[1:])
    if args and args[0].startswith("--") and args[0][2:].partition("=")[0] in FLAGS_BY_NAME:
        # Someone used to `tritonserver --model-repository=...`.
        raise CliError(f"{args[0]} is an option of the serve command: modelhost serve {' '.join(args)}")
    parser = _top_parser()
    try:
        parser.parse_args(args)
    except SystemExit as exit_:  # --help and --version end here
        return _exit_code(exit_)
    parser.print_help(sys.stderr)  # no command given
    return USAGE_ERROR


def parse_serve_args(argv: Sequence[str]) -> ServerOptions:
    """The options of `modelhost serve ARGV`. Raises CliError for a refused flag or a bad value."""
    options, _ = _parse_serve(argv)
    return options


def _serve(argv: Sequence[str], require_repository: bool = False) -> int:
    try:
        options, notes = _parse_serve(argv)
    except SystemExit as exit_:  # --help ends here
        return _exit_code(exit_)
    if not options.model_repositories and require_repository:
        raise CliError("--model-repository must be specified")
    if not options.model_repositories:
        examples = bundled_examples()
        if not examples.is_dir():
            raise CliError(f"no --model-repository given and no bundled examples at {examples}")
        options = dataclasses.replace(options, model_repositories=[str(examples)])
        notes.append(
            (logging.INFO, f"No --model-repository given: serving the bundled examples in {examples}")
        )
    try:
        configure_logging(options)
    except OSError as error:
        raise CliError(f"cannot open --log-file {options.log_file}: {error.strerror}") from error
    for level, message in notes:
        log.log(level, message)
    # Imported here: the parser and its tests need none of the server.
    from modelhost.app import run_server

    return run_server(options)


def _exit_code(exit_: SystemExit) -> int:
    return exit_.code if isinstance(exit_.code, int) else 0


# Parsing ---------------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise CliError(message)


class _Record(argparse.Action):
    """Keeps every flag in command-line order as (name, raw value); the table then decides what it means."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        given: list[tuple[str, str]] | None = getattr(namespace, "given", None)
        if given is None:
            given = []
            namespace.given = given
        given.append((self.dest, values if isinstance(values, str) else "true"))


def _top_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="modelhost",
        description="A model inference server, drop-in compatible with NVIDIA Triton Inference Server.",
        epilog="Run `modelhost serve --help` for the server's options (tritonserver's flags).",
        allow_abbrev=False,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"modelhost {modelhost.__version__} "
        f"(compatible with Triton Inference Server {modelhost.TRITON_COMPAT_VERSION})",
    )
    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    commands.add_parser("serve", help="Run the server on HTTP, GRPC and metrics ports (8000, 8001, 8002).")
    commands.add_parser("perf", help="Measure a model's throughput and latency, as perf_analyzer does.")
    commands.add_parser(
        "tune",
        help="Find the model configuration that serves a model best, as Model Analyzer does (docs/tune.md).",
    )
    commands.add_parser(
        "sagemaker",
        help="Run the server as a SageMaker container does (Triton's `serve` script), from SAGEMAKER_* variables.",
    )
    commands.add_parser(
        "convert", help="Convert a model for a backend: modelhost convert onnx-to-tensorrt ..."
    )
    commands.add_parser(
        "ray", help="Serve a model repository on a Ray cluster, each model scaling on its own (docs/ray.md)."
    )
    commands.add_parser(
        "compatibility", help="Print what of Triton modelhost serves, item by item (docs/compatibility.md)."
    )
    return parser


def _compatibility(args: list[str]) -> int:
    """`modelhost compatibility`: docs/compatibility.md, written from the code."""
    if args:
        raise CliError("compatibility takes no arguments: modelhost compatibility > docs/compatibility.md")
    from modelhost.compatibility.page import markdown

    sys.stdout.write(markdown(FLAGS, SECTIONS))
    return 0


def _convert_model(args: list[str]) -> int:
    """`modelhost convert <converter> ...`: the converters the backends provide (backends/registry.py)."""
    from modelhost.backends.registry import MissingExtra, converters, run_converter

    available = converters()
    if not args or args[0] in ("-h", "--help"):
        print("usage: modelhost convert CONVERTER [options]\n\nconverters:")
        for name, description in available.items():
            print(f"  {name:<20} {description}")
        print("\n`modelhost convert CONVERTER --help` describes its options.")
        return 0 if args else USAGE_ERROR
    if args[0] not in available:
        raise CliError(f"unknown converter '{args[0]}' (converters: {', '.join(available)})")
    try:
        return run_converter(args[0], args[1:])
    except MissingExtra as e:
        raise CliError(str(e)) from None


_SERVE_DESCRIPTION = """\
Run the inference server. The options are tritonserver's, in its forms: --flag=value or --flag value;
booleans as true/false, on/off or 1/0. With no options, the bundled example models are served on ports
8000 (HTTP), 8001 (GRPC) and 8002 (metrics).

Options marked [ignored] are accepted and have no effect in modelhost. Options marked [not supported yet]
end the command with an error, except for the values listed as accepted, which describe what modelhost
does anyway."""


def serve_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="modelhost serve",
        # Our own usage line: argparse's generated one would list ~90 flags and trips on bracketed metavars.
        usage="modelhost serve [--model-repository <path>]... [options]",
        description=_SERVE_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        # As tritonserver (getopt_long): a flag may be shortened to a prefix no other flag has (Triton's own qa
        # starts it with --log-warn); a prefix of several flags is an error.
        allow_abbrev=True,
    )
    for section in SECTIONS:
        group = parser.add_argument_group(f"{section} options")
        for flag in FLAGS:
            if flag.section == section:
                group.add_argument(
                    flag.option,
                    action=_Record,
                    dest=flag.name,
                    nargs=0 if flag.kind == "switch" else None,
                    metavar=(flag.metavar or METAVARS[flag.kind]) or None,
                    default=argparse.SUPPRESS,
                    help=_help_text(flag).replace("%", "%%"),
                )
    return parser


def _help_text(flag: Flag) -> str:
    text = flag.help
    if flag.kind != "switch":
        text += f" (default: {flag.default or 'unset'})"
    if flag.status is Status.IGNORED:
        text += f" [ignored: {flag.note}]"
    elif flag.status is Status.REFUSED:
        accepted = f"; accepted: {', '.join(flag.accepted)}" if flag.accepted else ""
        text += f" [not supported yet{accepted}]"
    return text


# The trace flags, each as the --trace-config prefix its value goes after.
_TRACE_FLAGS = {
    "trace-config": "",
    "trace-file": "triton,file=",
    "trace-level": "level=",
    "trace-rate": "rate=",
    "trace-count": "count=",
    "trace-log-frequency": "triton,log-frequency=",
}


def _frontend_processes(raw: str) -> int:
    text = raw.strip().lower()
    if text == "auto":
        return auto_frontend_processes(cpu_count())
    number = int_or_none(text)
    if number is None:
        raise CliError(f"--frontend-processes must be a number or auto, got {raw!r}")
    return number


def _memory_budget(raw: str) -> int:
    from modelhost.engine.registry.model_memory import parse_size

    try:
        return parse_size(raw)
    except ValueError as e:
        raise CliError(f"--model-memory-budget: {e}") from None


def _port_range(flag: Flag, raw: str) -> tuple[int, int]:
    low, dash, high = raw.strip().partition("-")
    if not dash or int_or_none(low) is None or int_or_none(high) is None:
        raise CliError(f"{flag.option} format is '<low>-<high>', got {raw!r}")
    return int(low), int(high)


def _parse_serve(argv: Sequence[str]) -> tuple[ServerOptions, list[Note]]:
    namespace = serve_parser().parse_args(list(argv))
    given: list[tuple[str, str]] = getattr(namespace, "given", [])
    return _build_options(given)


def _build_options(given: list[tuple[str, str]]) -> tuple[ServerOptions, list[Note]]:
    notes: list[Note] = []
    values: dict[str, Any] = {}  # ServerOptions field -> value; a later flag overrides an earlier one
    repositories: list[str] = []
    load_models: list[str] = []
    backend_config: dict[str, dict[str, str]] = {}
    cuda_pools: dict[int, int] = {}  # a GPU named twice keeps its last value
    load_limits: dict[int, float] = {}
    rate_limit_resources: list[tuple[str, int, int | None]] = []
    metrics_config: dict[str, str] = {}  # a setting given twice keeps its last value
    trace_config: list[str] = []  # checked by ServerOptions (tracing/settings.py)
    cache_config: list[str] = []  # checked by ServerOptions (response_cache.py)
    http_restrictions: Restrictions = {}
    grpc_restrictions: Restrictions = {}
    host_policies: dict[str, dict[str, str]] = {}  # a setting given twice keeps its last value
    disable_auto_complete = strict_model_config = strict_given = False
    try:
        values.update(vertex_ai_defaults(os.environ))  # the flags below override them
    except VertexAiSettingsError as error:
        raise CliError(str(error)) from None
    for name, raw in given:
        flag = FLAGS_BY_NAME[name]
        if flag.status is Status.REFUSED:
            if not flag.accepts(raw):
                raise CliError(flag.refusal())
            continue
        if name == "log-verbose" and bool_or_none(raw) is not None:
            raw = str(int(bool(bool_or_none(raw))))  # tritonserver takes true/false for 1/0 here too
        value = _convert(flag, raw)  # an ignored flag's value is checked too
        if flag.status is Status.IGNORED:
            notes.append((logging.INFO, f"{flag.option} is ignored: {flag.note}"))
        elif name in ("model-repository", "model-store"):
            repository = _repository(flag, raw)
            if repository not in repositories:  # tritonserver keeps a set: the same path twice is one
                repositories.append(repository)
        elif name == "load-model":
            load_models.append(raw)
        elif name == "host-policy":
            policy, _, setting = raw.partition(",")
            key, eq, setting_value = setting.partition("=")
            if not policy.strip() or not key.strip() or not eq:
                raise CliError(f"--host-policy must be <policy>,<setting>=<value>, got '{raw}'")
            host_policies.setdefault(policy.strip(), {})[key.strip()] = setting_value.strip()
        elif name == "model-control-mode":
            values["model_control_mode"] = raw.strip().lower()  # tritonserver lowercases it too
        elif name == "rate-limit":
            values["rate_limit"] = raw.strip().lower()  # as tritonserver
        elif name == "rate-limit-resource":
            rate_limit_resources.append(_rate_limit_resource(raw))
        elif name == "metrics-config":
            setting, equals, setting_value = raw.partition("=")
            if not equals or not setting.strip():
                raise CliError(f"--metrics-config format is '<setting>=<value>', got {raw!r}")
            metrics_config[setting.strip()] = setting_value  # checked by ServerOptions
        elif name == "cache-config":
            cache_config.append(raw)
        elif name in ("http-restricted-api", "grpc-restricted-protocol"):
            http = name == "http-restricted-api"
            try:
                add_restriction(
                    http_restrictions if http else grpc_restrictions,
                    raw,
                    name,
                    key_prefix="" if http else GRPC_HEADER_PREFIX,
                    feature="api" if http else "protocol",
                )
            except ValueError as error:
                raise CliError(str(error)) from None
        elif name == "response-cache-byte-size":
            if int(value) > 0:  # 0: no cache, as in tritonserver
                cache_config.append(f"local,size={int(value)}")
        elif name in _TRACE_FLAGS:
            trace_config.append(_TRACE_FLAGS[name] + raw)  # the deprecated flags, as --trace-config
        elif name == "backend-config":
            backend, setting, setting_value = _backend_setting(raw)
            backend_config.setdefault(backend, {})[setting] = setting_value
        elif name == "cuda-memory-pool-byte-size":
            gpu, size = _cuda_pool(flag, raw)
            cuda_pools[gpu] = size
        elif name == "model-load-gpu-limit":
            gpu, fraction = _load_limit(flag, raw)
            load_limits[gpu] = fraction
        elif name == "frontend-processes":
            values["frontend_processes"] = _frontend_processes(raw)
        elif name == "model-memory-budget":
            values["model_memory_budget"] = _memory_budget(raw)
        elif name == "sagemaker-safe-port-range":
            values["sagemaker_safe_port_range"] = _port_range(flag, raw)
        elif name == "disable-auto-complete-config":
            disable_auto_complete = True
        elif name == "strict-model-config":
            strict_model_config = bool(value)
            strict_given = True
            notes.append(  # tritonserver's words, which scripts (Triton's L0_model_config) look for
                (
                    logging.WARNING,
                    "Warning: '--strict-model-config' has been deprecated! Please use "
                    "'--disable-auto-complete-config' instead.",
                )
            )
        elif name == "log-verbose":
            values["log_verbose"] = max(0, int(value))  # tritonserver treats a negative level as 0
        elif name == "log-file":
            values["log_file"] = raw or None  # tritonserver: an empty name logs to the console
        elif flag.field is not None:
            values[flag.field] = value
        else:  # a honoured flag this function forgot: a bug, not a user error
            raise AssertionError(f"{flag.option} has no field and no rule")
    # --disable-auto-complete-config wins over --strict-model-config=false, as in tritonserver.
    if disable_auto_complete and strict_given and not strict_model_config:
        notes.append(
            (
                logging.WARNING,
                "Warning: Overriding deprecated '--strict-model-config' from False to True in favor of "
                "'--disable-auto-complete-config'!",
            )
        )
    values["auto_complete_config"] = not (disable_auto_complete or strict_model_config)
    if not repositories and os.environ.get("AIP_STORAGE_URI"):
        # A Vertex AI container's model artifacts (gs://...), as tritonserver takes them when none is given.
        repositories.append(os.environ["AIP_STORAGE_URI"])
    try:
        options = ServerOptions(
            model_repositories=repositories,
            load_models=load_models,
            backend_config=backend_config,
            cuda_memory_pool_byte_size=cuda_pools,
            model_load_gpu_limit=load_limits,
            rate_limit_resources=rate_limit_resources,
            metrics_config=metrics_config,
            trace_config=trace_config,
            cache_config=cache_config,
            http_restricted_api=http_restrictions,
            grpc_restricted_protocol=grpc_restrictions,
            host_policies=host_policies,
            **values,
        )
    except ValueError as error:
        raise CliError(str(error)) from error
    return options, notes


def _convert(flag: Flag, raw: str) -> bool | int | float | str:
    if flag.kind == "bool":
        value = bool_or_none(raw)
        if value is None:
            raise CliError(f"{flag.option}: invalid boolean value {raw!r} (use true/false, on/off or 1/0)")
        return value
    if flag.kind == "int":
        number = int_or_none(raw)
        if number is None:
            raise CliError(f"{flag.option}: invalid integer value {raw!r}")
        return number
    if flag.kind == "float":
        try:
            return float(raw)
        except ValueError:
            raise CliError(f"{flag.option}: invalid number {raw!r}") from None
    if flag.kind == "address":
        return parse_address(raw)
    return raw


def _repository(flag: Flag, raw: str) -> str:
    if not raw:
        raise CliError(f"{flag.option} must not be empty")
    return raw


def _backend_setting(raw: str) -> BackendSetting:
    """`[<backend>,]<setting>=<value>`; no backend means a global setting (backend "")."""
    key, equals, value = raw.partition("=")
    backend, comma, setting = key.partition(",")
    if not comma:
        backend, setting = "", key
    if not equals or not setting:
        raise CliError(f"--backend-config format is '[<backend>,]<setting>=<value>', got {raw!r}")
    if comma and not backend:
        raise CliError(f"--backend-config {raw!r} names no backend before the comma")
    return backend, setting, value


def _gpu_setting(flag: Flag, raw: str) -> tuple[int, str]:
    """tritonserver's `<gpu>:<value>`, split at the first colon; the GPU is an integer (checked for >= 0 by
    ServerOptions, in tritonserver's words)."""
    gpu_text, colon, value = raw.partition(":")
    gpu = int_or_none(gpu_text)
    if not colon or gpu is None:
        raise CliError(f"{flag.option} format is '{flag.metavar}', got {raw!r}")
    return gpu, value


def _cuda_pool(flag: Flag, raw: str) -> tuple[int, int]:
    gpu, value = _gpu_setting(flag, raw)
    size = int_or_none(value)
    if size is None:
        raise CliError(f"{flag.option}: invalid byte size {value!r} in {raw!r}")
    return gpu, size


def _rate_limit_resource(raw: str) -> tuple[str, int, int | None]:
    # Imported here: the parser needs nothing else of the scheduling package.
    from modelhost.engine.scheduling.rate_limiter import parse_resource_flag

    try:
        return parse_resource_flag(raw)
    except ValueError as error:
        raise CliError(str(error)) from None


def _load_limit(flag: Flag, raw: str) -> tuple[int, float]:
    gpu, value = _gpu_setting(flag, raw)
    try:
        return gpu, float(value)
    except ValueError:
        raise CliError(f"{flag.option}: invalid fraction {value!r} in {raw!r}") from None


if __name__ == "__main__":
    sys.exit(main())
