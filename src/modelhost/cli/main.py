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
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, NoReturn

import modelhost
from modelhost.host.devices import cpu_count
from modelhost.observability.logs import LOGGER_NAME, configure_logging
from modelhost.options import (
    HONOURED_BACKEND_CONFIG,
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


class Status(StrEnum):
    HONOURED = "honoured"
    IGNORED = "ignored"
    REFUSED = "not supported yet"


Kind = Literal["bool", "int", "float", "str", "address", "switch"]

_METAVARS: dict[str, str] = {
    "bool": "<boolean>",
    "int": "<integer>",
    "float": "<float>",
    "str": "<string>",
    "address": "<address>",
    "switch": "",
}


@dataclass(frozen=True, slots=True)
class Flag:
    name: str  # without the leading dashes
    kind: Kind
    default: str  # the default as text ("" = unset): ours where honoured, tritonserver's otherwise
    help: str
    section: str
    status: Status = Status.HONOURED
    # The ServerOptions field a honoured flag sets; None where building the options needs more than a copy.
    field: str | None = None
    repeatable: bool = False
    metavar: str = ""
    # Refused flags: the values that describe what modelhost does anyway, so they are accepted.
    accepted: tuple[str, ...] = ()
    # Ignored flags: why they have no meaning here. Refused flags: what is missing (and when it comes).
    note: str = ""

    @property
    def option(self) -> str:
        return f"--{self.name}"

    def refusal(self) -> str:
        message = f"{self.option} is not supported yet"
        if self.note:
            message += f": {self.note}"
        if self.accepted:
            message += "; accepted only as " + " or ".join(
                f"{self.option}={value}" for value in self.accepted
            )
        return message

    def accepts(self, raw: str) -> bool:
        """Whether a refused flag's value is one that modelhost honours by what it does anyway."""
        if self.kind == "bool":
            value = bool_or_none(raw)
            return value is not None and any(value == bool_or_none(a) for a in self.accepted)
        if self.kind == "int":
            number = _int_or_none(raw)
            return number is not None and number in {_int_or_none(a) for a in self.accepted}
        return raw.strip().lower() in {a.lower() for a in self.accepted}


# Sections, in tritonserver's --help order.
SERVER = "Server"
REPOSITORY = "Model repository"
LOGGING = "Logging"
HTTP = "HTTP"
GRPC = "GRPC"
METRICS = "Metrics"
BACKEND = "Backend"
TRACING = "Tracing"
CACHE = "Response cache"
RATE_LIMITER = "Rate limiter"
MEMORY = "Memory and devices"
SAGEMAKER = "SageMaker"
VERTEX_AI = "Vertex AI"
SECTIONS = (SERVER, REPOSITORY, LOGGING, HTTP, GRPC, METRICS, BACKEND, TRACING, CACHE, RATE_LIMITER, MEMORY,
            SAGEMAKER, VERTEX_AI)  # fmt: skip

_NO_THREAD_POOL = "modelhost serves from an asyncio event loop, not a pool of threads"
_NO_GPU = "modelhost does not manage GPU memory or devices"


def _honoured(name: str, kind: Kind, default: str, section: str, help: str, **more: Any) -> Flag:
    return Flag(name, kind, default, help, section, Status.HONOURED, **more)


def _ignored(name: str, kind: Kind, default: str, section: str, help: str, note: str, **more: Any) -> Flag:
    return Flag(name, kind, default, help, section, Status.IGNORED, note=note, **more)


def _refused(name: str, kind: Kind, default: str, section: str, help: str, note: str, **more: Any) -> Flag:
    return Flag(name, kind, default, help, section, Status.REFUSED, note=note, **more)


FLAGS: tuple[Flag, ...] = (
    # Server
    _honoured("id", "str", "triton", SERVER,
              "Identifier of this server, reported as `name` by server metadata.", field="server_id"),
    _honoured("exit-timeout-secs", "int", "30", SERVER,
              "Seconds to wait for in-flight inferences to finish when shutting down.",
              field="exit_timeout_secs"),
    _honoured("exit-on-error", "bool", "true", SERVER,
              "Exit if an error occurs during initialization, e.g. a model fails to load.",
              field="exit_on_error"),
    _honoured("strict-readiness", "bool", "true", SERVER,
              "If true, ready only when the server is live and all models are ready; if false, when live.",
              field="strict_readiness"),
    _honoured("frontend-processes", "str", "0", SERVER,
              "modelhost only: serve HTTP and gRPC from N frontend processes in front of one engine process "
              "(auto: "
              "from the cores, see docs/frontend-processes.md); 0 serves everything from one process.",
              metavar="<N|auto>"),
    _honoured("frontend-buffer-byte-size", "int", str(1 << 28), SERVER,
              "modelhost only: bytes of requests one frontend process may have in flight to the engine; past "
              "that, requests are refused with 503 at once.", field="frontend_buffer_byte_size"),
    _honoured("allow-client-shm", "bool", "false", SERVER,
              "Let clients register and use shared-memory regions: system shared memory, and CUDA shared "
              "memory on a host with a GPU and the `cuda` extra.", field="allow_client_shm"),
    # Model repository
    _honoured("model-repository", "str", "the bundled examples", REPOSITORY,
              "A model repository: a local path, s3://[<host>:<port>/]<bucket>/<prefix>, gs:// or as://; "
              "repeatable. A model name found in two repositories makes that model unavailable.",
              repeatable=True, metavar="<path>"),
    _honoured("model-store", "str", "the bundled examples", REPOSITORY,
              "Same as --model-repository.", repeatable=True, metavar="<path>"),
    _honoured("model-config-name", "str", "", REPOSITORY,
              "Use <model>/configs/<name>.pbtxt where it exists instead of config.pbtxt.",
              field="model_config_name"),
    _honoured("disable-auto-complete-config", "switch", "", REPOSITORY,
              "Do not auto-complete model configurations: config.pbtxt files must be complete."),
    _honoured("strict-model-config", "bool", "false", REPOSITORY,
              "DEPRECATED: true is the same as --disable-auto-complete-config."),
    _honoured("model-control-mode", "str", "none", REPOSITORY,
              "How models are loaded: none (all at startup, fixed), poll (all at startup, then the "
              "repositories are rescanned every --repository-poll-secs) or explicit (those named by "
              "--load-model at startup, then through the repository API).", field="model_control_mode"),
    _honoured("repository-poll-secs", "int", "15", REPOSITORY,
              "Seconds between polls of the repositories (poll mode only).", field="repository_poll_secs"),
    _honoured("load-model", "str", "", REPOSITORY,
              "Model to load at startup (explicit mode only); repeatable; '*' loads every model.",
              repeatable=True, metavar="<name>"),
    _honoured("model-load-on-demand", "bool", "false", REPOSITORY,
              "modelhost only (explicit mode): an inference request for a model of the repositories that is "
              "not loaded loads it, then is served; concurrent requests wait for the one load.",
              field="model_load_on_demand"),
    _honoured("model-idle-unload-secs", "int", "0", REPOSITORY,
              "modelhost only (explicit mode): unload models no request used for this many seconds (0: never; "
              "never those named by --load-model).", field="model_idle_unload_secs"),
    _honoured("model-load-thread-count", "int", "4", REPOSITORY,
              "Number of model versions loaded concurrently.", field="model_load_thread_count"),
    _honoured("model-load-retry-count", "int", "0", REPOSITORY,
              "Times to retry loading a model version that failed to load.", field="model_load_retry_count"),
    _refused("model-namespacing", "bool", "false", REPOSITORY,
             "Allow the same model name in different repositories.",
             "model namespacing is not implemented yet", accepted=("false",)),
    _ignored("enable-peer-access", "bool", "true", REPOSITORY,
             "Enable GPU peer-to-peer access.", _NO_GPU),
    # Logging
    _honoured("log-verbose", "int", "0", LOGGING,
              "Verbose logging level; 0 disables verbose logging, 1 and more enable it.",
              field="log_verbose"),
    _honoured("log-info", "bool", "true", LOGGING, "Enable info-level logging.", field="log_info"),
    _honoured("log-warning", "bool", "true", LOGGING, "Enable warning-level logging.", field="log_warning"),
    _honoured("log-error", "bool", "true", LOGGING, "Enable error-level logging.", field="log_error"),
    _honoured("log-format", "str", "default", LOGGING,
              "'default' (LMMDD hh:mm:ss.ssssss) or 'ISO8601' (YYYY-MM-DDThh:mm:ssZ L).",
              field="log_format", metavar="<default|ISO8601>"),
    _honoured("log-file", "str", "", LOGGING,
              "Append the log to this file instead of writing it to stderr.", field="log_file",
              metavar="<path>"),
    # HTTP
    _honoured("allow-http", "bool", "true", HTTP, "Serve the HTTP/REST (KServe v2) API.", field="allow_http"),
    _honoured("http-address", "address", "0.0.0.0", HTTP,
              "Address the HTTP server binds to; IPv6 as ipv6:[::1].", field="http_address"),
    _honoured("http-port", "int", "8000", HTTP, "Port of the HTTP server; 0 picks a free port.",
              field="http_port"),
    _honoured("http-max-input-size", "int", str(1 << 26), HTTP,
              "Largest HTTP request body in bytes, also after decompression.", field="http_max_input_size"),
    _ignored("http-thread-count", "int", "8", HTTP, "Number of threads serving HTTP.", _NO_THREAD_POOL),
    _refused("reuse-http-port", "bool", "false", HTTP,
             "Let several servers listen on the same HTTP port (SO_REUSEPORT).",
             "port reuse is not implemented yet", accepted=("false",)),
    _refused("http-header-forward-pattern", "str", "", HTTP,
             "Regular expression of HTTP headers forwarded as request parameters.",
             "header forwarding is not implemented yet"),
    _refused("http-restricted-api", "str", "", HTTP,
             "Require a header for some API categories; repeatable.",
             "API restriction is not implemented yet", repeatable=True, metavar="<apis>:<key>=<value>"),
    # GRPC
    _honoured("allow-grpc", "bool", "true", GRPC, "Serve the GRPC (KServe v2) API.", field="allow_grpc"),
    _honoured("grpc-address", "address", "0.0.0.0", GRPC,
              "Address the GRPC server binds to; IPv6 as ipv6:[::1].", field="grpc_address"),
    _honoured("grpc-port", "int", "8001", GRPC, "Port of the GRPC server; 0 picks a free port.",
              field="grpc_port"),
    _ignored("grpc-infer-thread-count", "int", "2", GRPC,
             "Number of threads handling GRPC inference requests.", _NO_THREAD_POOL),
    _ignored("grpc-infer-allocation-pool-size", "int", "8", GRPC,
             "Inference request/response objects kept for reuse.",
             "modelhost keeps no pool of request objects"),
    _refused("grpc-max-response-pool-size", "int", "2147483647", GRPC,
             "Most inference response objects in flight.",
             "response pool limits are not implemented yet", accepted=("2147483647",)),
    _refused("reuse-grpc-port", "bool", "false", GRPC,
             "Let several servers listen on the same GRPC port (SO_REUSEPORT).",
             "port reuse is not implemented yet", accepted=("false",)),
    _refused("grpc-header-forward-pattern", "str", "", GRPC,
             "Regular expression of GRPC headers forwarded as request parameters.",
             "header forwarding is not implemented yet"),
    _refused("grpc-use-ssl", "bool", "false", GRPC, "Use SSL for GRPC.",
             "GRPC over SSL is not implemented yet", accepted=("false",)),
    _refused("grpc-use-ssl-mutual", "bool", "false", GRPC, "Use mutual SSL authentication for GRPC.",
             "GRPC over SSL is not implemented yet", accepted=("false",)),
    _refused("grpc-server-cert", "str", "", GRPC, "PEM file of the server certificate.",
             "GRPC over SSL is not implemented yet"),
    _refused("grpc-server-key", "str", "", GRPC, "PEM file of the server key.",
             "GRPC over SSL is not implemented yet"),
    _refused("grpc-root-cert", "str", "", GRPC, "PEM file of the root certificate.",
             "GRPC over SSL is not implemented yet"),
    _refused("grpc-infer-response-compression-level", "str", "none", GRPC,
             "Compression of inference responses: none, low, medium or high.",
             "response compression is not implemented yet", accepted=("none",)),
    # The keepalive defaults are gRPC's own, which modelhost's GRPC server keeps.
    _refused("grpc-keepalive-time", "int", "7200000", GRPC,
             "Milliseconds between keepalive pings.", "keepalive settings are not configurable yet",
             accepted=("7200000",)),
    _refused("grpc-keepalive-timeout", "int", "20000", GRPC,
             "Milliseconds to wait for a keepalive ping acknowledgement.",
             "keepalive settings are not configurable yet", accepted=("20000",)),
    _refused("grpc-keepalive-permit-without-calls", "bool", "false", GRPC,
             "Allow keepalive pings when no call is in flight.",
             "keepalive settings are not configurable yet", accepted=("false",)),
    _refused("grpc-http2-max-pings-without-data", "int", "2", GRPC,
             "Most pings sent without data (0 = no limit).",
             "keepalive settings are not configurable yet", accepted=("2",)),
    _refused("grpc-http2-min-recv-ping-interval-without-data", "int", "300000", GRPC,
             "Least milliseconds between received pings without data.",
             "keepalive settings are not configurable yet", accepted=("300000",)),
    _refused("grpc-http2-max-ping-strikes", "int", "2", GRPC,
             "Bad pings tolerated before the connection is closed (0 = any number).",
             "keepalive settings are not configurable yet", accepted=("2",)),
    _refused("grpc-max-connection-age", "int", "", GRPC, "Most milliseconds a channel may exist.",
             "connection ages are not configurable yet"),
    _refused("grpc-max-connection-age-grace", "int", "", GRPC,
             "Grace period after a channel reaches its maximum age.",
             "connection ages are not configurable yet"),
    _refused("grpc-restricted-protocol", "str", "", GRPC,
             "Require a header for some protocol categories; repeatable.",
             "protocol restriction is not implemented yet", repeatable=True,
             metavar="<protocols>:<key>=<value>"),
    # Metrics
    _honoured("allow-metrics", "bool", "true", METRICS, "Serve Prometheus metrics at /metrics.",
              field="allow_metrics"),
    _honoured("metrics-address", "address", "the --http-address", METRICS,
              "Address the metrics server binds to.", field="metrics_address"),
    _honoured("metrics-port", "int", "8002", METRICS, "Port of the metrics server; 0 picks a free port.",
              field="metrics_port"),
    _honoured("allow-gpu-metrics", "bool", "true", METRICS,
              "Report GPU metrics (nv_gpu_*, through NVML: needs the optional nvidia-ml-py and a GPU; "
              "without them there are simply no GPU families).", field="allow_gpu_metrics"),
    _honoured("allow-cpu-metrics", "bool", "true", METRICS,
              "Report CPU and memory metrics (nv_cpu_*, from /proc).", field="allow_cpu_metrics"),
    _honoured("metrics-interval-ms", "float", "2000", METRICS,
              "Milliseconds between collections of the per-interval (CPU, GPU) metrics.",
              field="metrics_interval_ms"),
    _honoured("metrics-config", "str", "", METRICS,
              "A metrics setting; repeatable: counter_latencies (true), histogram_latencies (false), "
              "summary_latencies (false), summary_quantiles (0.5:0.05,0.9:0.01,0.95:0.001,0.99:0.001,"
              "0.999:0.001).", repeatable=True, metavar="<setting>=<value>"),
    # Backend
    _honoured("backend-config", "str", "", BACKEND,
              "A backend setting; repeatable. Honoured: "
              + ", ".join(f"{b},{k}" if b else f"{k} (global)" for b, keys in HONOURED_BACKEND_CONFIG.items()
                          for k in keys)
              + "; other settings are not supported yet (docs/cli.md says what each does).",
              repeatable=True, metavar="[<backend>,]<setting>=<value>"),
    _honoured("backend-directory", "str", "/opt/tritonserver/backends", BACKEND,
              "Directory of backends: modelhost finds python-based backends there (<dir>/<name>/model.py); its "
              "other backends are built in.", field="backend_directory"),
    _ignored("repoagent-directory", "str", "/opt/tritonserver/repoagents", BACKEND,
             "Directory of repository agent shared libraries.", "modelhost loads no repository agents"),
    # Tracing
    _honoured("trace-config", "str", "", TRACING,
              "A trace setting, global (level, rate, count, mode) or for a mode (triton,file=<path>, "
              "triton,log-frequency=<n>, opentelemetry,url=<url>, opentelemetry,resource=<k>=<v>, "
              "opentelemetry,bsp_*=<n>); repeatable. See docs/tracing.md.",
              repeatable=True, metavar="[<mode>,]<setting>=<value>"),
    _honoured("trace-file", "str", "", TRACING, "DEPRECATED: use --trace-config triton,file=<path>."),
    _honoured("trace-level", "str", "OFF", TRACING, "DEPRECATED: use --trace-config level=<level>.",
              repeatable=True),
    _honoured("trace-rate", "int", "1000", TRACING, "DEPRECATED: use --trace-config rate=<n>."),
    _honoured("trace-count", "int", "-1", TRACING, "DEPRECATED: use --trace-config count=<n>."),
    _honoured("trace-log-frequency", "int", "0", TRACING,
              "DEPRECATED: use --trace-config triton,log-frequency=<n>."),
    # Response cache
    _honoured("cache-config", "str", "", CACHE,
              "A response cache setting: local,size=<bytes> (the redis cache is not supported yet); repeatable.",
              repeatable=True, metavar="<cache>,<setting>=<value>"),
    _ignored("cache-directory", "str", "/opt/tritonserver/caches", CACHE,
             "Directory of cache shared libraries.", "modelhost loads no cache shared libraries"),
    _honoured("response-cache-byte-size", "int", "0", CACHE,
              "DEPRECATED: use --cache-config local,size=<bytes>."),
    # Rate limiter
    _honoured("rate-limit", "str", "off", RATE_LIMITER,
              "Rate limiter mode: off, or execution_count (an instance executes only once the resources its "
              "instance group's rate_limiter asks for are available; priority weighs who goes next).",
              metavar="<off|execution_count>"),
    _honoured("rate-limit-resource", "str", "", RATE_LIMITER,
              "Copies of a rate limiter resource, on one device or (no device) on each; repeatable. Default: "
              "the most any loaded instance asks for.",
              repeatable=True, metavar="<name>:<count>[:<device>]"),
    # Memory and devices
    # The memory flags: what they map onto is in modelhost/gpu_memory.py; none has an effect without a GPU.
    _ignored("pinned-memory-pool-byte-size", "int", "268435456", MEMORY,
             "Bytes of pinned host memory for host/device copies.",
             "ONNX Runtime allocates its own pinned host memory and offers no limit for it; modelhost has no "
             "staging pool of its own"),
    _honoured("cuda-memory-pool-byte-size", "str", "", MEMORY,
              "Bytes of GPU memory for a GPU; repeatable. ONNX Runtime's gpu_mem_limit for each instance on "
              "that GPU (0 = no limit). No effect on a host without a GPU.",
              repeatable=True, metavar="<gpu>:<bytes>"),
    _refused("cuda-virtual-address-size", "str", "", MEMORY,
             "CUDA virtual address size for growable implicit state; repeatable.", _NO_GPU,
             repeatable=True, metavar="<gpu>:<bytes>"),
    _refused("min-supported-compute-capability", "float", "", MEMORY,
             "Least CUDA compute capability of the GPUs used.", _NO_GPU),
    _ignored("buffer-manager-thread-count", "int", "0", MEMORY,
             "Threads for tensor copies.", "modelhost copies tensors in the threads that use them"),
    _honoured("model-memory-budget", "str", "", MEMORY,
              "modelhost only: bytes the loaded models may take together in host memory (512MiB, 4GB, or a "
              "percentage of RAM such as 60%). Loads past it first unload idle models, least recently used "
              "first (explicit mode; never those named by --load-model); a load that still does not fit "
              "fails (507 / RESOURCE_EXHAUSTED). See docs/model-memory.md.", metavar="<size>"),
    _refused("host-policy", "str", "", MEMORY,
             "A host policy setting (numa-node, cpu-cores); repeatable.",
             "host policies are not implemented yet", repeatable=True,
             metavar="<policy>,<setting>=<value>"),
    _honoured("model-load-gpu-limit", "str", "", MEMORY,
              "Fail the load of a GPU instance when, once created, more than this fraction (0.0 to 1.0) of "
              "its GPU's memory is in use; repeatable. No effect on a host without a GPU.",
              repeatable=True, metavar="<gpu>:<fraction>"),
    # SageMaker
    _honoured("allow-sagemaker", "bool", "false", SAGEMAKER,
              "Serve the SageMaker API (/ping, /invocations, and the multi-model /models routes) on "
              "--sagemaker-port. See docs/sagemaker.md.", field="allow_sagemaker"),
    _honoured("sagemaker-port", "int", "8080", SAGEMAKER, "Port of the SageMaker API; 0 picks a free port.",
              field="sagemaker_port"),
    _honoured("sagemaker-safe-port-range", "str", "", SAGEMAKER,
              "Ports the listeners other than SageMaker's must use (with --allow-sagemaker=true): startup "
              "fails when one is outside.", metavar="<low>-<high>"),
    _ignored("sagemaker-thread-count", "int", "8", SAGEMAKER,
             "Number of threads serving SageMaker.", _NO_THREAD_POOL),
    # Vertex AI
    _refused("allow-vertex-ai", "bool", "true iff AIP_MODE=PREDICTION", VERTEX_AI, "Serve the Vertex AI API.",
             "the Vertex AI API is not implemented yet", accepted=("false",)),
    _refused("vertex-ai-port", "int", "AIP_HTTP_PORT or 8080", VERTEX_AI, "Port of the Vertex AI API.",
             "the Vertex AI API is not implemented yet"),
    _refused("vertex-ai-default-model", "str", "", VERTEX_AI,
             "Model for Vertex AI requests that name none.", "the Vertex AI API is not implemented yet"),
    _ignored("vertex-ai-thread-count", "int", "8", VERTEX_AI,
             "Number of threads serving Vertex AI.", _NO_THREAD_POOL),
)  # fmt: skip

FLAGS_BY_NAME: dict[str, Flag] = {flag.name: flag for flag in FLAGS}

_INT = re.compile(r"[+-]?[0-9]+")

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


def _serve(argv: Sequence[str]) -> int:
    try:
        options, notes = _parse_serve(argv)
    except SystemExit as exit_:  # --help ends here
        return _exit_code(exit_)
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
                    metavar=(flag.metavar or _METAVARS[flag.kind]) or None,
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
    number = _int_or_none(text)
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
    if not dash or _int_or_none(low) is None or _int_or_none(high) is None:
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
    disable_auto_complete = strict_model_config = strict_given = False
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
        number = _int_or_none(raw)
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


def _int_or_none(raw: str) -> int | None:
    text = raw.strip()
    return int(text) if _INT.fullmatch(text) else None


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
    gpu = _int_or_none(gpu_text)
    if not colon or gpu is None:
        raise CliError(f"{flag.option} format is '{flag.metavar}', got {raw!r}")
    return gpu, value


def _cuda_pool(flag: Flag, raw: str) -> tuple[int, int]:
    gpu, value = _gpu_setting(flag, raw)
    size = _int_or_none(value)
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


# Documentation ---------------------------------------------------------------------------------------------


def flags_markdown() -> str:
    """The flag tables of docs/cli.md, one per section, from FLAGS."""
    out: list[str] = []
    for section in SECTIONS:
        out += [f"### {section}", "", "| Flag | Default | Status | Meaning |", "|---|---|---|---|"]
        for flag in (f for f in FLAGS if f.section == section):
            cells = (_md_flag(flag), _md_text(flag.default or "—"), _md_status(flag), _md_text(flag.help))
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def _md_flag(flag: Flag) -> str:
    usage = flag.option if flag.kind == "switch" else f"{flag.option}={flag.metavar or _METAVARS[flag.kind]}"
    # In a table, a pipe must be escaped even inside a code span.
    return f"`{usage}`".replace("|", "\\|") + (" (repeatable)" if flag.repeatable else "")


def _md_status(flag: Flag) -> str:
    if flag.status is Status.IGNORED:
        return f"ignored: {_md_text(flag.note)}"
    if flag.status is Status.REFUSED:
        accepted = ", ".join(f"`{value}`" for value in flag.accepted)
        return f"not supported yet: {_md_text(flag.note)}" + (f" (accepted: {accepted})" if accepted else "")
    return "**honoured**"


def _md_text(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


if __name__ == "__main__":
    sys.exit(main())
