"""What the server honours from its command line, with tritonserver's defaults.

`ServerOptions` is built by the CLI (modelhost.cli.serve_args) or directly by code and tests; it validates itself,
so a server never starts on a value the CLI would have refused. Flags modelhost ignores or refuses never reach it.
The parts of the server take the small settings made from it (options/log.py, limits.py, cache.py, trace.py,
metrics.py), not ServerOptions itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from modelhost.host.gpu_memory import GpuMemory
from modelhost.host.host_policy import HostPolicyError, placements
from modelhost.options.backend_config import backend_config_problems
from modelhost.options.cache import parse_cache_config
from modelhost.options.limits import GrpcLimits, HttpLimits
from modelhost.options.log import LOG_FORMATS, LogOptions
from modelhost.options.metrics import parse_metrics_config
from modelhost.options.trace import parse_trace_config
from modelhost.options.values import pattern_problem

# The connection limits' defaults, each the default of its flag.
_HTTP = HttpLimits()
_GRPC = GrpcLimits()
DEFAULT_FRONTEND_BUFFER_BYTE_SIZE = 1 << 28  # 256 MiB
MAX_FRONTEND_PROCESSES = 64
MODEL_CONTROL_MODES = ("none", "poll", "explicit")
RATE_LIMIT_MODES = ("off", "execution_count")

@dataclass(slots=True, frozen=True, kw_only=True)
class ServerOptions:
    # Empty: the caller substitutes the bundled example repository (`modelhost serve` does).
    model_repositories: list[str] = field(default_factory=list)
    server_id: str = "triton"
    http_address: str = "0.0.0.0"
    http_port: int = 8000
    grpc_address: str = "0.0.0.0"
    # SO_REUSEPORT on the listeners: several servers share the port and the kernel spreads connections.
    reuse_http_port: bool = False
    # --model-namespacing: the same model name may be in several repositories.
    model_namespacing: bool = False
    reuse_grpc_port: bool = False
    # Regular expressions of the headers (metadata) forwarded as request parameters; "" forwards none.
    http_header_forward_pattern: str = ""
    grpc_header_forward_pattern: str = ""
    # --http-console: the web console at `/` of the HTTP port (modelhost only).
    http_console: bool = True
    grpc_port: int = 8001
    metrics_address: str = ""  # "" = the same as http_address, as tritonserver
    metrics_port: int = 8002
    allow_http: bool = True
    allow_grpc: bool = True
    allow_metrics: bool = True
    strict_readiness: bool = True
    exit_on_error: bool = True
    exit_timeout_secs: int = 30
    allow_client_shm: bool = False  # clients may register and use system shared memory
    model_config_name: str | None = None
    auto_complete_config: bool = True
    http_max_input_size: int = _HTTP.max_body
    http_max_header_size: int = _HTTP.max_head
    http_idle_timeout_secs: float = _HTTP.idle_timeout
    http_request_timeout_secs: float = _HTTP.request_timeout
    grpc_max_decompressed_size: int = _GRPC.max_decompressed_size
    grpc_idle_timeout_secs: float = _GRPC.idle_timeout
    grpc_request_timeout_secs: float = _GRPC.request_timeout
    http_max_connections: int = _HTTP.max_connections
    # gRPC keepalive and connection age (milliseconds), tritonserver's flags and defaults.
    grpc_keepalive_time: int = _GRPC.keepalive_time
    grpc_keepalive_timeout: int = _GRPC.keepalive_timeout
    grpc_keepalive_permit_without_calls: bool = _GRPC.keepalive_permit_without_calls
    grpc_http2_max_pings_without_data: int = _GRPC.max_pings_without_data
    grpc_http2_min_recv_ping_interval_without_data: int = _GRPC.min_recv_ping_interval
    grpc_http2_max_ping_strikes: int = _GRPC.max_ping_strikes
    grpc_max_connection_age: int | None = _GRPC.max_connection_age
    grpc_max_connection_age_grace: int | None = _GRPC.max_connection_age_grace
    grpc_max_connections: int = _GRPC.max_connections
    # --http-restricted-api and --grpc-restricted-protocol: category -> (header, value) (frontends/restrictions.py).
    http_restricted_api: dict[str, tuple[str, str]] = field(default_factory=dict)
    # TLS (frontends/tls.py): tritonserver's gRPC flags, and ours of the same shape for the HTTP and SageMaker ports.
    http_use_ssl: bool = False
    http_use_ssl_mutual: bool = False
    http_server_cert: str = ""
    http_server_key: str = ""
    http_root_cert: str = ""
    grpc_use_ssl: bool = False
    grpc_use_ssl_mutual: bool = False
    grpc_server_cert: str = ""
    grpc_server_key: str = ""
    grpc_root_cert: str = ""
    grpc_restricted_protocol: dict[str, tuple[str, str]] = field(default_factory=dict)
    log_verbose: int = 0
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_format: str = "default"
    log_file: str | None = None  # None (or "") = stderr
    # Model management: none | poll | explicit, as tritonserver's --model-control-mode.
    model_control_mode: str = "none"
    load_models: list[str] = field(default_factory=list)  # --load-model, explicit mode; "*" = all
    repository_poll_secs: int = 15
    model_load_thread_count: int = 4
    model_load_retry_count: int = 0
    # backend name ("" = global) -> setting -> value, as given to --backend-config.
    backend_config: dict[str, dict[str, str]] = field(default_factory=dict)
    backend_directory: str = "/opt/tritonserver/backends"  # python-based backends: <dir>/<name>/model.py
    # The memory flags; modelhost.host.gpu_memory says what they map onto.
    cuda_memory_pool_byte_size: dict[int, int] = field(default_factory=dict)  # CUDA device -> bytes
    model_load_gpu_limit: dict[int, float] = field(default_factory=dict)  # CUDA device -> fraction in use
    # The rate limiter: off | execution_count, and --rate-limit-resource as (name, count, device; None = all).
    rate_limit: str = "off"
    rate_limit_resources: list[tuple[str, int, int | None]] = field(default_factory=list)
    # Metrics families and their refresh; --metrics-config as given (setting -> value), see options/metrics.py.
    allow_cpu_metrics: bool = True
    allow_gpu_metrics: bool = True
    metrics_interval_ms: float = 2000.0
    metrics_config: dict[str, str] = field(default_factory=dict)
    # --cache-config values as given (options/cache.py checks them).
    cache_config: list[str] = field(default_factory=list)
    # --trace-config values as given (the deprecated trace flags translated), see options/trace.py.
    trace_config: list[str] = field(default_factory=list)
    # --frontend-processes (`auto` resolved by auto_frontend_processes): 0 = every protocol served by the engine
    # process.
    frontend_processes: int = 0
    # --frontend-buffer-byte-size: request bytes one frontend process may have in flight to the engine.
    frontend_buffer_byte_size: int = DEFAULT_FRONTEND_BUFFER_BYTE_SIZE
    # --model-memory-budget in bytes (None: no budget), --model-load-on-demand, --model-idle-unload-secs (0: never).
    model_memory_budget: int | None = None
    model_load_on_demand: bool = False
    model_idle_unload_secs: int = 0
    # The SageMaker listener (--allow-sagemaker), its port, and the ports the other listeners must use.
    allow_sagemaker: bool = False
    sagemaker_port: int = 8080
    sagemaker_safe_port_range: tuple[int, int] | None = None
    # The Vertex AI endpoint (frontends/vertex_ai); AIP_* variables change the CLI's defaults.
    allow_vertex_ai: bool = False
    vertex_ai_port: int = 8080
    vertex_ai_default_model: str = ""
    # --host-policy: policy name -> {setting: value} (host/host_policy.py checks them against this host).
    host_policies: dict[str, dict[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.metrics_address:
            # Frozen: the one place a field is filled in after construction.
            object.__setattr__(self, "metrics_address", self.http_address)
        problems = _problems(self)
        if problems:
            raise ValueError("; ".join(problems))

    def http_limits(self) -> HttpLimits:
        """The limits of an HTTP connection (the HTTP, SageMaker and Vertex AI ports)."""
        return HttpLimits(
            max_body=self.http_max_input_size,
            max_head=self.http_max_header_size,
            idle_timeout=self.http_idle_timeout_secs,
            request_timeout=self.http_request_timeout_secs,
            max_connections=self.http_max_connections,
        )

    def grpc_limits(self) -> GrpcLimits:
        """The limits of a gRPC connection."""
        return GrpcLimits(
            max_decompressed_size=self.grpc_max_decompressed_size,
            idle_timeout=self.grpc_idle_timeout_secs,
            request_timeout=self.grpc_request_timeout_secs,
            max_connections=self.grpc_max_connections,
            keepalive_time=self.grpc_keepalive_time,
            keepalive_timeout=self.grpc_keepalive_timeout,
            keepalive_permit_without_calls=self.grpc_keepalive_permit_without_calls,
            max_pings_without_data=self.grpc_http2_max_pings_without_data,
            min_recv_ping_interval=self.grpc_http2_min_recv_ping_interval_without_data,
            max_ping_strikes=self.grpc_http2_max_ping_strikes,
            max_connection_age=self.grpc_max_connection_age,
            max_connection_age_grace=self.grpc_max_connection_age_grace,
        )

    def gpu_memory(self) -> GpuMemory:
        """--cuda-memory-pool-byte-size and --model-load-gpu-limit, as the backends take them."""
        return GpuMemory(dict(self.cuda_memory_pool_byte_size), dict(self.model_load_gpu_limit))

    def log_options(self) -> LogOptions:
        """The --log-* options, as the logs take them."""
        return LogOptions(
            verbose=self.log_verbose,
            info=self.log_info,
            warning=self.log_warning,
            error=self.log_error,
            format=self.log_format,
            file=self.log_file,
        )


# Flags whose values have a least value (their option field is the flag's name with underscores; None: unset):
# flag, least value, how the message says it.
_LOWER_BOUNDS: tuple[tuple[str, float, str], ...] = (
    ("http-max-input-size", 1, "greater than 0"),
    ("http-max-header-size", 1024, "1024 or more"),
    ("http-idle-timeout-secs", 1e-9, "greater than 0"),
    ("http-request-timeout-secs", 1e-9, "greater than 0"),
    ("grpc-idle-timeout-secs", 1e-9, "greater than 0"),
    ("grpc-request-timeout-secs", 1e-9, "greater than 0"),
    ("grpc-max-decompressed-size", 1, "greater than 0"),
    ("grpc-keepalive-time", 1, "1 or more milliseconds"),
    ("grpc-keepalive-timeout", 1, "1 or more milliseconds"),
    ("grpc-max-connection-age", 1, "1 or more milliseconds"),
    ("grpc-http2-max-pings-without-data", 0, "0 or more"),
    ("grpc-http2-min-recv-ping-interval-without-data", 0, "0 or more"),
    ("grpc-http2-max-ping-strikes", 0, "0 or more"),
    ("grpc-max-connection-age-grace", 0, "0 or more"),
    ("http-max-connections", 1, "1 or more"),
    ("grpc-max-connections", 1, "1 or more"),
)


def _problems(options: ServerOptions) -> list[str]:
    problems: list[str] = []
    for flag, port in (
        ("--http-port", options.http_port),
        ("--grpc-port", options.grpc_port),
        ("--metrics-port", options.metrics_port),
        ("--sagemaker-port", options.sagemaker_port),
        ("--vertex-ai-port", options.vertex_ai_port),
    ):
        if not 0 <= port <= 65535:
            problems.append(f"{flag} must be between 0 and 65535, got {port}")
    for flag, address in (
        ("--http-address", options.http_address),
        ("--grpc-address", options.grpc_address),
        ("--metrics-address", options.metrics_address),
    ):
        if not address:
            problems.append(f"{flag} must not be empty")
    if not options.server_id:
        problems.append("--id must not be empty")
    try:
        placements(options.host_policies)
    except HostPolicyError as e:
        problems.append(f"--host-policy: {e}")
    for protocol in ("http", "grpc"):
        flag = f"--{protocol}-header-forward-pattern"
        if problem := pattern_problem(flag, getattr(options, f"{protocol}_header_forward_pattern")):
            problems.append(problem)
    if not 0 <= options.frontend_processes <= MAX_FRONTEND_PROCESSES:
        problems.append(
            f"--frontend-processes must be auto or between 0 and {MAX_FRONTEND_PROCESSES}, got "
            f"{options.frontend_processes}"
        )
    if options.frontend_buffer_byte_size < 1:
        problems.append(
            f"--frontend-buffer-byte-size must be 1 or more, got {options.frontend_buffer_byte_size}"
        )
    if options.exit_timeout_secs < 0:
        problems.append(f"--exit-timeout-secs must be 0 or more, got {options.exit_timeout_secs}")
    for flag, least, words in _LOWER_BOUNDS:
        value = getattr(options, flag.replace("-", "_"))
        if value is not None and value < least:
            problems.append(f"--{flag} must be {words}, got {value:g}")
    for protocol in ("http", "grpc"):
        use, mutual, cert, key, root = (
            getattr(options, f"{protocol}_{name}")
            for name in ("use_ssl", "use_ssl_mutual", "server_cert", "server_key", "root_cert")
        )
        if (use or mutual) and not (cert and key):
            which = f"--{protocol}-use-ssl-mutual" if mutual else f"--{protocol}-use-ssl"
            problems.append(f"{which} needs --{protocol}-server-cert and --{protocol}-server-key")
        if mutual and not root:
            problems.append(
                f"--{protocol}-use-ssl-mutual needs --{protocol}-root-cert (the CA that signs the clients' "
                "certificates)"
            )
    if options.log_verbose < 0:
        problems.append(f"--log-verbose must be 0 or more, got {options.log_verbose}")
    if options.log_format not in LOG_FORMATS:
        problems.append(f"--log-format must be 'default' or 'ISO8601', got {options.log_format!r}")
    name = options.model_config_name
    if name is not None and (not name or any(c.isspace() for c in name) or "/" in name):
        # tritonserver: "The name should not contain any space character"; a slash would leave configs/.
        problems.append(f"--model-config-name must be a non-empty name without spaces or '/', got {name!r}")
    problems.extend(_model_control_problems(options))
    problems.extend(backend_config_problems(options.backend_config))
    problems.extend(_memory_problems(options))
    problems.extend(_rate_limit_problems(options))
    problems.extend(_metrics_problems(options))
    problems.extend(_trace_problems(options))
    problems.extend(_cache_problems(options))
    problems.extend(_port_collisions(options))
    problems.extend(_safe_port_problems(options))
    return problems


def _safe_port_problems(options: ServerOptions) -> list[str]:
    """--sagemaker-safe-port-range: the listeners other than SageMaker's must use ports inside it (SageMaker
    reserves the others), as tritonserver checks at startup."""
    if options.sagemaker_safe_port_range is None or not options.allow_sagemaker:
        return []
    low, high = options.sagemaker_safe_port_range
    problems: list[str] = []
    if not 0 < low <= high <= 65535:
        return [
            f"--sagemaker-safe-port-range must be <low>-<high> with 0 < low <= high <= 65535, got {low}-{high}"
        ]
    for flag, enabled, port in (
        ("--http-port", options.allow_http, options.http_port),
        ("--grpc-port", options.allow_grpc, options.grpc_port),
        ("--metrics-port", options.allow_metrics, options.metrics_port),
    ):
        if enabled and not low <= port <= high:
            problems.append(
                f"{flag} {port} is outside --sagemaker-safe-port-range {low}-{high} (SageMaker reserves the "
                "ports outside it)"
            )
    return problems


def _model_control_problems(options: ServerOptions) -> list[str]:
    problems: list[str] = []
    if options.model_control_mode not in MODEL_CONTROL_MODES:
        problems.append(
            f"--model-control-mode must be none, poll or explicit, got {options.model_control_mode!r}"
        )
    if options.load_models and options.model_control_mode != "explicit":
        problems.append("Use of '--load-model' requires setting '--model-control-mode=explicit' as well.")
    if "*" in options.load_models and len(options.load_models) > 1:
        problems.append("Wildcard model name '*' must be the ONLY startup model if specified at all.")
    if any(not name.strip() for name in options.load_models):
        problems.append("--load-model must name a model")
    if options.repository_poll_secs < 0:
        problems.append(f"--repository-poll-secs must be 0 or more, got {options.repository_poll_secs}")
    if options.model_load_thread_count < 1:
        problems.append(f"--model-load-thread-count must be 1 or more, got {options.model_load_thread_count}")
    if options.model_load_retry_count < 0:
        problems.append(f"--model-load-retry-count must be 0 or more, got {options.model_load_retry_count}")
    if options.model_load_on_demand and options.model_control_mode != "explicit":
        problems.append("--model-load-on-demand=true requires --model-control-mode=explicit")
    if options.model_idle_unload_secs < 0:
        problems.append(f"--model-idle-unload-secs must be 0 or more, got {options.model_idle_unload_secs}")
    if options.model_idle_unload_secs and options.model_control_mode != "explicit":
        problems.append("--model-idle-unload-secs requires --model-control-mode=explicit")
    return problems


def _memory_problems(options: ServerOptions) -> list[str]:
    # The device and fraction messages are tritonserver's own.
    problems: list[str] = []
    for gpu, size in options.cuda_memory_pool_byte_size.items():
        if gpu < 0:
            problems.append(f"--cuda-memory-pool-byte-size expects device ID >= 0, got {gpu}")
        if size < 0:
            problems.append(f"--cuda-memory-pool-byte-size for GPU {gpu} must be 0 or more bytes, got {size}")
    if options.model_memory_budget is not None and options.model_memory_budget <= 0:
        problems.append(f"--model-memory-budget must be more than 0 bytes, got {options.model_memory_budget}")
    for gpu, fraction in options.model_load_gpu_limit.items():
        if gpu < 0:
            problems.append(f"--model-load-gpu-limit expects device ID >= 0, got {gpu}")
        if not 0.0 <= fraction <= 1.0:  # NaN included
            problems.append(
                f"--model-load-gpu-limit expects limit fraction to be in range [0.0, 1.0], got {fraction}"
            )
    return problems


def _rate_limit_problems(options: ServerOptions) -> list[str]:
    problems: list[str] = []
    if options.rate_limit not in RATE_LIMIT_MODES:
        problems.append(f"--rate-limit must be off or execution_count, got {options.rate_limit!r}")
    for name, count, device in options.rate_limit_resources:
        if not name or ":" in name:
            problems.append(f"--rate-limit-resource must name a resource, got {name!r}")
        if count < 0:
            problems.append(f"--rate-limit-resource count of {name!r} must be 0 or more, got {count}")
        if device is not None and device < 0:
            problems.append(f"--rate-limit-resource device of {name!r} must be 0 or more, got {device}")
    return problems


def _metrics_problems(options: ServerOptions) -> list[str]:
    problems: list[str] = []
    if not options.metrics_interval_ms > 0:  # NaN included
        problems.append(f"--metrics-interval-ms must be greater than 0, got {options.metrics_interval_ms}")
    try:
        parse_metrics_config(options.metrics_config)
    except ValueError as error:
        problems.append(str(error))
    return problems


def _cache_problems(options: ServerOptions) -> list[str]:
    try:
        parse_cache_config(options.cache_config)
    except ValueError as error:
        return [f"--cache-config: {error}"]
    return []


def _trace_problems(options: ServerOptions) -> list[str]:
    try:
        settings, _ = parse_trace_config(options.trace_config)
    except ValueError as error:
        return [f"--trace-config: {error}"]
    if settings.mode == "opentelemetry":
        try:
            import opentelemetry.sdk.trace  # noqa: F401
        except ImportError:
            return [
                "--trace-config mode=opentelemetry needs the 'tracing' extra: pip install 'modelhost[tracing]'"
            ]
    return []


def _port_collisions(options: ServerOptions) -> list[str]:
    # tritonserver refuses two enabled services on the same address and port (the same address string, as it
    # compares). Port 0 asks the OS for a free port, so two services on port 0 never collide here.
    services = [
        (name, address, port)
        for name, enabled, address, port in (
            ("HTTP", options.allow_http, options.http_address, options.http_port),
            ("GRPC", options.allow_grpc, options.grpc_address, options.grpc_port),
            ("metrics", options.allow_metrics, options.metrics_address, options.metrics_port),
            ("SageMaker", options.allow_sagemaker, options.http_address, options.sagemaker_port),
        )
        if enabled and port != 0
    ]
    problems: list[str] = []
    for i, (name, address, port) in enumerate(services):
        for other, other_address, other_port in services[i + 1 :]:
            if address == other_address and port == other_port:
                problems.append(
                    f"The server cannot listen to {name} requests and {other} requests "
                    f"at the same address and port {address}:{port}"
                )
    return problems
