"""The command line of `modelhost serve`: tritonserver's flags, in tritonserver's forms.

Every tritonserver flag is known, in one table (flags.py's FLAGS) from which the parser, `--help`, docs/cli.md and
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
import logging
import os
from collections.abc import Sequence
from typing import Any

from modelhost.cli import flag_values
from modelhost.cli.errors import CliError, CliParser
from modelhost.cli.flags import FLAGS, FLAGS_BY_NAME, METAVARS, SECTIONS, Flag, Status
from modelhost.frontends.restrictions import GRPC_HEADER_PREFIX, Restrictions, add_restriction
from modelhost.frontends.vertex_ai.settings import VertexAiSettingsError, vertex_ai_defaults
from modelhost.options import ServerOptions, bool_or_none

# Messages for the log, kept until logging is configured: (level, message)
Note = tuple[int, str]


def parse_serve_args(argv: Sequence[str]) -> ServerOptions:
    """The options of `modelhost serve ARGV`. Raises CliError for a refused flag or a bad value."""
    options, _ = parse_serve(argv)
    return options


def parse_serve(argv: Sequence[str]) -> tuple[ServerOptions, list[Note]]:
    """The options of `modelhost serve ARGV`, and the notes to log once logging is configured (ignored flags,
    deprecations). `--help` ends in SystemExit."""
    namespace = serve_parser().parse_args(list(argv))
    given: list[tuple[str, str]] = getattr(namespace, "given", [])
    return _build_options(given)


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


_SERVE_DESCRIPTION = """\
Run the inference server. The options are tritonserver's, in its forms: --flag=value or --flag value;
booleans as true/false, on/off or 1/0. With no options, the bundled example models are served on ports
8000 (HTTP), 8001 (GRPC) and 8002 (metrics).

Options marked [ignored] are accepted and have no effect in modelhost. Options marked [not supported yet]
end the command with an error, except for the values listed as accepted, which describe what modelhost
does anyway."""


def serve_parser() -> argparse.ArgumentParser:
    parser = CliParser(
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
    trace_config: list[str] = []  # checked by ServerOptions (options/trace.py)
    cache_config: list[str] = []  # checked by ServerOptions (options/cache.py)
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
        value = flag_values.convert(flag, raw)  # an ignored flag's value is checked too
        if flag.status is Status.IGNORED:
            notes.append((logging.INFO, f"{flag.option} is ignored: {flag.note}"))
        elif name in ("model-repository", "model-store"):
            repository = flag_values.repository(flag, raw)
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
            rate_limit_resources.append(flag_values.rate_limit_resource(raw))
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
        elif name in flag_values.TRACE_FLAGS:  # the deprecated flags, as --trace-config
            trace_config.append(flag_values.TRACE_FLAGS[name] + raw)
        elif name == "backend-config":
            backend, setting, setting_value = flag_values.backend_setting(raw)
            backend_config.setdefault(backend, {})[setting] = setting_value
        elif name == "cuda-memory-pool-byte-size":
            gpu, size = flag_values.cuda_pool(flag, raw)
            cuda_pools[gpu] = size
        elif name == "model-load-gpu-limit":
            gpu, fraction = flag_values.load_limit(flag, raw)
            load_limits[gpu] = fraction
        elif name == "frontend-processes":
            values["frontend_processes"] = flag_values.frontend_processes(raw)
        elif name == "model-memory-budget":
            values["model_memory_budget"] = flag_values.memory_budget(raw)
        elif name == "sagemaker-safe-port-range":
            values["sagemaker_safe_port_range"] = flag_values.port_range(flag, raw)
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
