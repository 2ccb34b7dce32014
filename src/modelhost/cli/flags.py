"""Every tritonserver flag, in one table (FLAGS) from which the parser, `--help`, docs/cli.md and the tests all
derive: honoured, ignored (no meaning in modelhost's design) or refused (not supported yet), with its section,
default and help."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from modelhost.options import HONOURED_BACKEND_CONFIG, bool_or_none

INT = re.compile(r"[+-]?[0-9]+")


class Status(StrEnum):
    HONOURED = "honoured"
    IGNORED = "ignored"
    REFUSED = "not supported yet"


Kind = Literal["bool", "int", "float", "str", "address", "switch"]

METAVARS: dict[str, str] = {
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
            number = int_or_none(raw)
            return number is not None and number in {int_or_none(a) for a in self.accepted}
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
    _honoured("model-namespacing", "bool", "false", REPOSITORY,
              "Allow the same model name in different repositories, each model in its repository's namespace: "
              "an ensemble's steps are its repository's models, metrics carry a namespace label, and a request "
              "naming a model several repositories hold is refused as ambiguous.", field="model_namespacing"),
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
    _honoured("http-max-header-size", "int", str(1 << 16), HTTP,
              "modelhost only: largest HTTP request line and headers together, in bytes; past it, 414 (a long "
              "URL) or 431.", field="http_max_header_size"),
    _honoured("http-max-connections", "int", "10000", HTTP,
              "modelhost only: open HTTP connections each serving process accepts; one more is answered 503 "
              "and closed.", field="http_max_connections"),
    _honoured("http-idle-timeout-secs", "float", "75", HTTP,
              "modelhost only: seconds a keep-alive HTTP connection may wait for its next request before it "
              "is closed.", field="http_idle_timeout_secs"),
    _honoured("http-request-timeout-secs", "float", "30", HTTP,
              "modelhost only: seconds an HTTP request's line and headers may take to arrive, and its body may "
              "go without a byte; past them, 408 and the connection is closed.",
              field="http_request_timeout_secs"),
    _honoured("http-use-ssl", "bool", "false", HTTP,
              "modelhost only: serve HTTP (and the SageMaker port) over TLS, with --http-server-cert and "
              "--http-server-key (reloaded on SIGHUP).", field="http_use_ssl"),
    _honoured("http-use-ssl-mutual", "bool", "false", HTTP,
              "modelhost only: serve HTTP over TLS and require client certificates signed by --http-root-cert.",
              field="http_use_ssl_mutual"),
    _honoured("http-server-cert", "str", "", HTTP, "modelhost only: PEM file of the HTTP server certificate.",
              field="http_server_cert", metavar="<path>"),
    _honoured("http-server-key", "str", "", HTTP, "modelhost only: PEM file of the HTTP server key.",
              field="http_server_key", metavar="<path>"),
    _honoured("http-root-cert", "str", "", HTTP,
              "modelhost only: PEM file of the CA(s) that sign client certificates (--http-use-ssl-mutual).",
              field="http_root_cert", metavar="<path>"),
    _ignored("http-thread-count", "int", "8", HTTP, "Number of threads serving HTTP.", _NO_THREAD_POOL),
    _honoured("reuse-http-port", "bool", "false", HTTP,
              "Let several servers listen on the same HTTP port (SO_REUSEPORT; the kernel spreads the "
              "connections over them). Each server must ask for it.", field="reuse_http_port"),
    _honoured("http-header-forward-pattern", "str", "", HTTP,
              "Regular expression of HTTP headers forwarded as string parameters of /infer requests; "
              "case-insensitive unless it starts with (?-i).", field="http_header_forward_pattern"),
    _honoured("http-restricted-api", "str", "", HTTP,
              "Serve the APIs of the categories named (health, metadata, inference, shared-memory, "
              "model-config, model-repository, statistics, trace, logging, and modelhost's console) only to "
              "requests with the header <key>: <value>, others get 403; repeatable (a category in one value "
              "only). The SageMaker port too.", repeatable=True, metavar="<apis>:<key>=<value>"),
    _honoured("http-console", "bool", "true", HTTP,
              "modelhost only: serve the web console at / of the HTTP port (its assets under /console/); "
              "false answers / with 404, as tritonserver does. See docs/console.md.", field="http_console"),
    # GRPC
    _honoured("allow-grpc", "bool", "true", GRPC, "Serve the GRPC (KServe v2) API.", field="allow_grpc"),
    _honoured("grpc-address", "address", "0.0.0.0", GRPC,
              "Address the GRPC server binds to; IPv6 as ipv6:[::1].", field="grpc_address"),
    _honoured("grpc-port", "int", "8001", GRPC, "Port of the GRPC server; 0 picks a free port.",
              field="grpc_port"),
    _honoured("grpc-max-decompressed-size", "int", str(1 << 26), GRPC,
              "modelhost only: largest size in bytes a compressed gRPC message may inflate to; past it, "
              "RESOURCE_EXHAUSTED.", field="grpc_max_decompressed_size"),
    _honoured("grpc-max-connections", "int", "10000", GRPC,
              "modelhost only: open gRPC connections each serving process accepts; one more is closed at once.",
              field="grpc_max_connections"),
    _honoured("grpc-idle-timeout-secs", "float", "300", GRPC,
              "modelhost only: seconds a gRPC connection may go without a call before it is sent GOAWAY and "
              "closed (clients reconnect at their next call).", field="grpc_idle_timeout_secs"),
    _honoured("grpc-request-timeout-secs", "float", "30", GRPC,
              "modelhost only: seconds a unary gRPC call's request may go without a byte (then "
              "DEADLINE_EXCEEDED), and a new connection may take to start its first call.",
              field="grpc_request_timeout_secs"),
    _ignored("grpc-infer-thread-count", "int", "2", GRPC,
             "Number of threads handling GRPC inference requests.", _NO_THREAD_POOL),
    _ignored("grpc-infer-allocation-pool-size", "int", "8", GRPC,
             "Inference request/response objects kept for reuse.",
             "modelhost keeps no pool of request objects"),
    _refused("grpc-max-response-pool-size", "int", "2147483647", GRPC,
             "Most inference response objects in flight.",
             "response pool limits are not implemented yet", accepted=("2147483647",)),
    _honoured("reuse-grpc-port", "bool", "false", GRPC,
              "Let several servers listen on the same GRPC port (SO_REUSEPORT; the kernel spreads the "
              "connections over them). Each server must ask for it.", field="reuse_grpc_port"),
    _honoured("grpc-header-forward-pattern", "str", "", GRPC,
              "Regular expression of GRPC metadata keys forwarded as string parameters of ModelInfer and "
              "ModelStreamInfer requests; case-insensitive unless it starts with (?-i).",
              field="grpc_header_forward_pattern"),
    _honoured("grpc-use-ssl", "bool", "false", GRPC,
              "Serve GRPC over TLS, with --grpc-server-cert and --grpc-server-key (reloaded on SIGHUP).",
              field="grpc_use_ssl"),
    _honoured("grpc-use-ssl-mutual", "bool", "false", GRPC,
              "Serve GRPC over TLS and require client certificates signed by --grpc-root-cert.",
              field="grpc_use_ssl_mutual"),
    _honoured("grpc-server-cert", "str", "", GRPC, "PEM file of the server certificate (chain).",
              field="grpc_server_cert", metavar="<path>"),
    _honoured("grpc-server-key", "str", "", GRPC, "PEM file of the server key.", field="grpc_server_key",
              metavar="<path>"),
    _honoured("grpc-root-cert", "str", "", GRPC,
              "PEM file of the CA(s) that sign client certificates (--grpc-use-ssl-mutual).",
              field="grpc_root_cert", metavar="<path>"),
    _refused("grpc-infer-response-compression-level", "str", "none", GRPC,
             "Compression of inference responses: none, low, medium or high.",
             "response compression is not implemented yet", accepted=("none",)),
    # Keepalive and connection age: tritonserver's flags, with gRPC's defaults (options/limits.py, GrpcLimits).
    _honoured("grpc-keepalive-time", "int", "7200000", GRPC,
              "Milliseconds of silence after which the server pings a connection with calls.",
              field="grpc_keepalive_time"),
    _honoured("grpc-keepalive-timeout", "int", "20000", GRPC,
              "Milliseconds to wait for a keepalive ping's acknowledgement before closing the connection.",
              field="grpc_keepalive_timeout"),
    _honoured("grpc-keepalive-permit-without-calls", "bool", "false", GRPC,
              "Ping connections without calls too, and let clients ping them.",
              field="grpc_keepalive_permit_without_calls"),
    _honoured("grpc-http2-max-pings-without-data", "int", "2", GRPC,
              "Most pings the server sends between two answers (0 = no limit).",
              field="grpc_http2_max_pings_without_data"),
    _honoured("grpc-http2-min-recv-ping-interval-without-data", "int", "300000", GRPC,
              "Least milliseconds between a client's pings with no answer between them; closer ones are strikes.",
              field="grpc_http2_min_recv_ping_interval_without_data"),
    _honoured("grpc-http2-max-ping-strikes", "int", "2", GRPC,
              "Strikes after which a client is sent GOAWAY too_many_pings and closed (0 = any number).",
              field="grpc_http2_max_ping_strikes"),
    _honoured("grpc-max-connection-age", "int", "", GRPC,
              "Milliseconds after which a connection is sent GOAWAY (its calls finish; clients reconnect).",
              field="grpc_max_connection_age"),
    _honoured("grpc-max-connection-age-grace", "int", "", GRPC,
              "Milliseconds a connection past its age may take to finish its calls before it is closed.",
              field="grpc_max_connection_age_grace"),
    _honoured("grpc-restricted-protocol", "str", "", GRPC,
              "Serve the RPCs of the categories named (as --http-restricted-api) only to calls with the "
              "metadata triton-grpc-protocol-<key>: <value>, others get UNAVAILABLE; repeatable.",
              repeatable=True, metavar="<protocols>:<key>=<value>"),
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
              "A response cache setting: local,size=<bytes>, or redis,<setting>=<value> (host, port, user, "
              "password, db, timeouts, pool_size, TLS files; docs/response-cache.md); repeatable.",
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
    _honoured("host-policy", "str", "", MEMORY,
              "A host policy setting: cpu-cores=<list> (0-3,8) or numa-node=<n>, for the instances whose group "
              "names the policy (host_policy), or of its kind (cpu, model, gpu_<n>); repeatable.",
              repeatable=True, metavar="<policy>,<setting>=<value>"),
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
    _honoured("allow-vertex-ai", "bool", "true iff AIP_MODE=PREDICTION", VERTEX_AI,
              "Serve the Vertex AI API (AIP_PREDICT_ROUTE, AIP_HEALTH_ROUTE). With AIP_MODE=PREDICTION it is on "
              "and HTTP and GRPC are off unless asked for; AIP_STORAGE_URI is then the model repository when "
              "none is given.", field="allow_vertex_ai"),
    _honoured("vertex-ai-port", "int", "AIP_HTTP_PORT or 8080", VERTEX_AI, "Port of the Vertex AI API.",
              field="vertex_ai_port"),
    _honoured("vertex-ai-default-model", "str", "", VERTEX_AI,
              "Model for Vertex AI requests without a redirect; by default the repository's only model.",
              field="vertex_ai_default_model"),
    _ignored("vertex-ai-thread-count", "int", "8", VERTEX_AI,
             "Number of threads serving Vertex AI.", _NO_THREAD_POOL),
)  # fmt: skip

FLAGS_BY_NAME: dict[str, Flag] = {flag.name: flag for flag in FLAGS}


def int_or_none(raw: str) -> int | None:
    text = raw.strip()
    return int(text) if INT.fullmatch(text) else None
