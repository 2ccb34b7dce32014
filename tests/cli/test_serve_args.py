"""The command line of `modelhost serve` (cli/serve_args.py): tritonserver's defaults and forms, the flags that
build ServerOptions, addresses, and a Vertex AI container's variables."""

from __future__ import annotations

import dataclasses
import re

import pytest

from modelhost.cli.errors import CliError
from modelhost.cli.flags import FLAGS, Flag, Status
from modelhost.cli.serve_args import parse_serve, parse_serve_args
from modelhost.options import ServerOptions

pytestmark = pytest.mark.usefixtures("restore_logging")

HONOURED = [f for f in FLAGS if f.status is Status.HONOURED]


# --- Defaults


def test_no_arguments_give_tritonserver_defaults() -> None:
    options = parse_serve_args([])
    assert options == ServerOptions()
    assert dataclasses.asdict(options) == {
        "model_repositories": [],
        "server_id": "triton",
        "http_address": "0.0.0.0",
        "http_port": 8000,
        "grpc_address": "0.0.0.0",
        "reuse_http_port": False,
        "reuse_grpc_port": False,
        "http_header_forward_pattern": "",
        "grpc_header_forward_pattern": "",
        "http_console": True,
        "allow_vertex_ai": False,
        "vertex_ai_port": 8080,
        "vertex_ai_default_model": "",
        "host_policies": {},
        "model_namespacing": False,
        "grpc_port": 8001,
        "metrics_address": "0.0.0.0",
        "metrics_port": 8002,
        "allow_http": True,
        "allow_grpc": True,
        "allow_metrics": True,
        "strict_readiness": True,
        "exit_on_error": True,
        "exit_timeout_secs": 30,
        "allow_client_shm": False,
        "model_config_name": None,
        "auto_complete_config": True,
        "http_max_input_size": 67108864,
        "http_max_header_size": 65536,
        "http_idle_timeout_secs": 75.0,
        "http_request_timeout_secs": 30.0,
        "grpc_max_decompressed_size": 67108864,
        "grpc_idle_timeout_secs": 300.0,
        "grpc_request_timeout_secs": 30.0,
        "http_max_connections": 10000,
        "grpc_keepalive_time": 7200000,
        "grpc_keepalive_timeout": 20000,
        "grpc_keepalive_permit_without_calls": False,
        "grpc_http2_max_pings_without_data": 2,
        "grpc_http2_min_recv_ping_interval_without_data": 300000,
        "grpc_http2_max_ping_strikes": 2,
        "grpc_max_connection_age": None,
        "grpc_max_connection_age_grace": None,
        "grpc_max_connections": 10000,
        "http_restricted_api": {},
        "grpc_restricted_protocol": {},
        "http_use_ssl": False,
        "http_use_ssl_mutual": False,
        "http_server_cert": "",
        "http_server_key": "",
        "http_root_cert": "",
        "grpc_use_ssl": False,
        "grpc_use_ssl_mutual": False,
        "grpc_server_cert": "",
        "grpc_server_key": "",
        "grpc_root_cert": "",
        "log_verbose": 0,
        "log_info": True,
        "log_warning": True,
        "log_error": True,
        "log_format": "default",
        "log_file": None,
        "model_control_mode": "none",
        "load_models": [],
        "repository_poll_secs": 15,
        "model_load_thread_count": 4,
        "model_load_retry_count": 0,
        "backend_config": {},
        "backend_directory": "/opt/tritonserver/backends",
        "cuda_memory_pool_byte_size": {},
        "model_load_gpu_limit": {},
        "rate_limit": "off",
        "rate_limit_resources": [],
        "allow_cpu_metrics": True,
        "allow_gpu_metrics": True,
        "metrics_interval_ms": 2000.0,
        "metrics_config": {},
        "trace_config": [],
        "cache_config": [],
        "frontend_processes": 0,
        "frontend_buffer_byte_size": 1 << 28,
        "model_memory_budget": None,
        "model_load_on_demand": False,
        "model_idle_unload_secs": 0,
        "allow_sagemaker": False,
        "sagemaker_port": 8080,
        "sagemaker_safe_port_range": None,
    }


# --metrics-address is documented as following --http-address, the Vertex AI flags as following AIP_* variables.
FOLLOWING = ("metrics-address", "allow-vertex-ai", "vertex-ai-port")


@pytest.mark.parametrize(
    "flag",
    [f for f in HONOURED if f.field and f.default and f.name not in FOLLOWING],
    ids=lambda f: f.name,
)
def test_documented_default_is_the_options_default(flag: Flag) -> None:
    assert parse_serve_args([f"{flag.option}={flag.default}"]) == ServerOptions()


HONOURED_SAMPLES = {
    "id": "other",
    "exit-timeout-secs": "5",
    "exit-on-error": "false",
    "strict-readiness": "false",
    "allow-client-shm": "true",
    "model-repository": "/models",
    "model-store": "/models",
    "model-config-name": "h100",
    "strict-model-config": "true",
    "log-verbose": "1",
    "log-info": "false",
    "log-warning": "false",
    "log-error": "false",
    "log-format": "ISO8601",
    "log-file": "/tmp/modelhost.log",
    "allow-http": "false",
    "http-address": "127.0.0.1",
    "http-port": "9000",
    "http-max-input-size": "1024",
    "http-max-header-size": "4096",
    "http-idle-timeout-secs": "5",
    "http-request-timeout-secs": "2.5",
    "grpc-max-decompressed-size": "1024",
    "grpc-idle-timeout-secs": "10",
    "grpc-request-timeout-secs": "3",
    "http-restricted-api": "health:k=v",
    "http-max-connections": "5",
    "grpc-keepalive-time": "10000",
    "grpc-keepalive-timeout": "1000",
    "grpc-keepalive-permit-without-calls": "true",
    "grpc-http2-max-pings-without-data": "0",
    "grpc-http2-min-recv-ping-interval-without-data": "1000",
    "grpc-http2-max-ping-strikes": "5",
    "grpc-max-connection-age": "60000",
    "grpc-max-connection-age-grace": "5000",
    "grpc-max-connections": "5",
    "grpc-restricted-protocol": "health:k=v",
    "http-use-ssl": "true",
    "reuse-http-port": "true",
    "reuse-grpc-port": "true",
    "http-header-forward-pattern": "^x-",
    "grpc-header-forward-pattern": "^x-",
    "allow-vertex-ai": "true",
    "vertex-ai-port": "9090",
    "vertex-ai-default-model": "m",
    "http-use-ssl-mutual": "true",
    "grpc-use-ssl": "true",
    "grpc-use-ssl-mutual": "true",
    "http-server-cert": "/certs/server.crt",
    "http-server-key": "/certs/server.key",
    "http-root-cert": "/certs/ca.crt",
    "grpc-server-cert": "/certs/server.crt",
    "grpc-server-key": "/certs/server.key",
    "grpc-root-cert": "/certs/ca.crt",
    "allow-grpc": "false",
    "grpc-address": "127.0.0.1",
    "grpc-port": "9001",
    "allow-metrics": "false",
    "metrics-address": "127.0.0.1",
    "metrics-port": "9002",
    "backend-config": "default-max-batch-size=8",
    "backend-directory": "/srv/backends",
    "model-control-mode": "explicit",
    "repository-poll-secs": "1",
    "load-model": "simple",
    "model-load-thread-count": "1",
    "model-load-retry-count": "3",
    "cuda-memory-pool-byte-size": "0:1000",
    "model-load-gpu-limit": "0:0.8",
    "rate-limit": "execution_count",
    "rate-limit-resource": "R1:4",
    "host-policy": "cpu,cpu-cores=0",
    "model-namespacing": "true",
    "allow-gpu-metrics": "false",
    "allow-cpu-metrics": "false",
    "metrics-interval-ms": "500",
    "metrics-config": "summary_latencies=true",
    "trace-config": "rate=5",
    "trace-file": "/tmp/trace.json",
    "trace-level": "OFF",
    "trace-rate": "5",
    "trace-count": "3",
    "trace-log-frequency": "2",
    "cache-config": "local,size=1024",
    "response-cache-byte-size": "2048",
    "frontend-processes": "2",
    "frontend-buffer-byte-size": "4096",
    "model-memory-budget": "512MiB",
    "model-load-on-demand": "true",
    "model-idle-unload-secs": "60",
    "allow-sagemaker": "true",
    "sagemaker-port": "9080",
    "sagemaker-safe-port-range": "8000-9002",
    "http-console": "false",
}
# Flags that are only valid together with another one.
PREREQUISITES = {
    "load-model": ["--model-control-mode=explicit"],
    "model-load-on-demand": ["--model-control-mode=explicit"],
    "model-idle-unload-secs": ["--model-control-mode=explicit"],
    "sagemaker-safe-port-range": ["--allow-sagemaker=true"],
    **{
        f"{port}-use-ssl{mutual}": [
            f"--{port}-server-cert=c",
            f"--{port}-server-key=k",
            f"--{port}-root-cert=r",
        ]
        for port in ("http", "grpc")
        for mutual in ("", "-mutual")
    },
}


@pytest.mark.parametrize("flag", HONOURED, ids=lambda f: f.name)
def test_every_honoured_flag_changes_the_options(flag: Flag) -> None:
    argv = [flag.option] if flag.kind == "switch" else [f"{flag.option}={HONOURED_SAMPLES[flag.name]}"]
    prerequisites = PREREQUISITES.get(flag.name, [])
    assert parse_serve_args(prerequisites + argv) != parse_serve_args(prerequisites)


# --- Forms


def test_equals_and_space_forms_are_the_same() -> None:
    joined = parse_serve_args(["--http-port=9000", "--id=abc", "--allow-grpc=false", "--log-verbose=2"])
    spaced = parse_serve_args(
        ["--http-port", "9000", "--id", "abc", "--allow-grpc", "false", "--log-verbose", "2"]
    )
    assert joined == spaced
    assert (joined.http_port, joined.server_id, joined.allow_grpc, joined.log_verbose) == (
        9000,
        "abc",
        False,
        2,
    )


@pytest.mark.parametrize("text", ["true", "TRUE", "True", "on", "ON", "1"])
def test_true_forms(text: str) -> None:
    assert parse_serve_args([f"--strict-readiness={text}"]).strict_readiness is True


@pytest.mark.parametrize("text", ["false", "FALSE", "False", "off", "Off", "0"])
def test_false_forms(text: str) -> None:
    assert parse_serve_args([f"--allow-metrics={text}"]).allow_metrics is False


@pytest.mark.parametrize("text", ["yes", "no", "2", ""])
def test_bad_bool_is_refused(text: str) -> None:
    with pytest.raises(CliError, match="--exit-on-error: invalid boolean value"):
        parse_serve_args([f"--exit-on-error={text}"])


def test_bool_flag_needs_a_value_as_in_tritonserver() -> None:
    with pytest.raises(CliError, match="--allow-http"):
        parse_serve_args(["--allow-http"])


@pytest.mark.parametrize("text", ["abc", "1.5", "", "8_000"])
def test_bad_integer_is_refused(text: str) -> None:
    with pytest.raises(CliError, match="--http-port: invalid integer value"):
        parse_serve_args([f"--http-port={text}"])


def test_repositories_accumulate_in_order_across_both_names() -> None:
    options = parse_serve_args(["--model-repository", "/a", "--model-store=/b", "--model-repository=/c"])
    assert options.model_repositories == ["/a", "/b", "/c"]


def test_the_same_repository_twice_is_one() -> None:
    # tritonserver keeps the paths in a set; Triton's L0_lifecycle config_override passes one path twice.
    options = parse_serve_args(["--model-repository=/a", "--model-repository=/b", "--model-store=/a"])
    assert options.model_repositories == ["/a", "/b"]


def test_a_repeated_flag_keeps_its_last_value() -> None:
    assert parse_serve_args(["--http-port=1", "--http-port=2"]).http_port == 2


@pytest.mark.parametrize("url", ["s3://bucket/models", "gs://bucket/models", "as://account/container/models"])
def test_cloud_repositories_are_taken_as_given(url: str) -> None:
    # Whether the store can be read is found out at startup (tests/e2e/test_s3_repository.py).
    assert parse_serve_args([f"--model-repository={url}"]).model_repositories == [url]


@pytest.mark.parametrize("mode", ["none", "poll", "explicit", "EXPLICIT", "Poll"])
def test_model_control_modes_in_any_case(mode: str) -> None:
    assert parse_serve_args([f"--model-control-mode={mode}"]).model_control_mode == mode.lower()


def test_load_models_accumulate_in_explicit_mode() -> None:
    options = parse_serve_args(
        ["--model-control-mode=explicit", "--load-model=a", "--load-model", "b", "--model-load-retry-count=2"]
    )
    assert options.load_models == ["a", "b"]
    assert options.model_load_retry_count == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model-control-mode=sometimes"], "must be none, poll or explicit"),
        (["--load-model=a"], "requires setting '--model-control-mode=explicit'"),
        (
            ["--model-control-mode=explicit", "--load-model=*", "--load-model=a"],
            "must be the ONLY startup model",
        ),
        (["--model-control-mode=explicit", "--load-model="], "must name a model"),
        (["--model-load-thread-count=0"], "must be 1 or more"),
        (["--model-load-retry-count=-1"], "must be 0 or more"),
        (["--repository-poll-secs=-5"], "must be 0 or more"),
    ],
)
def test_model_control_mistakes_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(CliError, match=re.escape(message)):
        parse_serve_args(argv)


def test_disable_auto_complete_config_takes_no_value() -> None:
    assert parse_serve_args(["--disable-auto-complete-config"]).auto_complete_config is False
    with pytest.raises(CliError):
        parse_serve_args(["--disable-auto-complete-config=true"])


@pytest.mark.parametrize(
    ("argv", "auto_complete"),
    [
        (["--strict-model-config=true"], False),
        (["--strict-model-config=false"], True),
        # As tritonserver: --disable-auto-complete-config wins over the deprecated flag.
        (["--disable-auto-complete-config", "--strict-model-config=false"], False),
        (["--strict-model-config=false", "--disable-auto-complete-config"], False),
    ],
)
def test_strict_model_config(argv: list[str], auto_complete: bool) -> None:
    assert parse_serve_args(argv).auto_complete_config is auto_complete


def test_strict_model_config_warnings_in_tritonservers_words() -> None:
    # Triton's L0_model_config cli_messages greps the log for them.
    deprecated = (
        "Warning: '--strict-model-config' has been deprecated! Please use "
        "'--disable-auto-complete-config' instead."
    )
    overriding = (
        "Warning: Overriding deprecated '--strict-model-config' from False to True in favor of "
        "'--disable-auto-complete-config'!"
    )
    _, notes = parse_serve(["--strict-model-config=true"])
    assert [m for _, m in notes] == [deprecated]
    _, notes = parse_serve(["--disable-auto-complete-config", "--strict-model-config=false"])
    assert [m for _, m in notes] == [deprecated, overriding]


def test_empty_log_file_means_stderr_as_in_tritonserver() -> None:
    assert parse_serve_args(["--log-file="]).log_file is None


def test_negative_log_verbose_counts_as_zero_as_in_tritonserver() -> None:
    assert parse_serve_args(["--log-verbose=-3"]).log_verbose == 0


def test_a_unique_prefix_is_the_flag_as_in_tritonserver() -> None:
    # getopt_long's rule, which Triton's L0_logging relies on (--log-warn=false)
    assert parse_serve_args(["--http-p=9000"]).http_port == 9000
    assert parse_serve_args(["--log-warn=false"]).log_warning is False
    with pytest.raises(CliError, match="ambiguous option: --http-"):
        parse_serve_args(["--http-=1"])


def test_unknown_flag_is_refused() -> None:
    with pytest.raises(CliError, match="unrecognized arguments: --no-such-flag"):
        parse_serve_args(["--no-such-flag=1"])


# --- Addresses


def test_metrics_address_follows_http_address() -> None:
    assert parse_serve_args(["--http-address=127.0.0.1"]).metrics_address == "127.0.0.1"
    options = parse_serve_args(["--http-address=127.0.0.1", "--metrics-address=127.0.0.2"])
    assert options.metrics_address == "127.0.0.2"


@pytest.mark.parametrize("text", ["ipv6:[::1]", "[::1]", "::1"])
def test_ipv6_address_forms(text: str) -> None:
    options = parse_serve_args([f"--http-address={text}", f"--grpc-address={text}"])
    assert (options.http_address, options.grpc_address, options.metrics_address) == ("::1", "::1", "::1")


def test_services_on_the_same_address_and_port_are_refused() -> None:
    with pytest.raises(
        CliError, match=r"cannot listen to HTTP requests and GRPC requests .* 0\.0\.0\.0:9000"
    ):
        parse_serve_args(["--http-port=9000", "--grpc-port=9000"])
    # Different addresses, a disabled service, or port 0 (a free port each) do not collide.
    parse_serve_args(["--http-port=9000", "--grpc-port=9000", "--grpc-address=127.0.0.1"])
    parse_serve_args(["--http-port=9000", "--grpc-port=9000", "--allow-grpc=false"])
    parse_serve_args(["--http-port=0", "--grpc-port=0", "--metrics-port=0"])


# --- Vertex AI


def test_a_vertex_ai_containers_variables_set_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIP_MODE", "PREDICTION")
    monkeypatch.setenv("AIP_HTTP_PORT", "9090")
    monkeypatch.setenv("AIP_STORAGE_URI", "gs://bucket/models")
    options = parse_serve_args([])
    assert options.allow_vertex_ai and not options.allow_http and not options.allow_grpc
    assert options.vertex_ai_port == 9090
    assert options.model_repositories == ["gs://bucket/models"]
    # Flags win over the variables.
    options = parse_serve_args(["--allow-http=true", "--vertex-ai-port=7000", "--model-repository=/m"])
    assert options.allow_http and options.vertex_ai_port == 7000 and options.model_repositories == ["/m"]
    monkeypatch.setenv("AIP_MODE", "")
    assert not parse_serve_args([]).allow_vertex_ai and parse_serve_args([]).allow_http
    monkeypatch.setenv("AIP_HTTP_PORT", "x")
    with pytest.raises(CliError, match="AIP_HTTP_PORT must be an integer, got 'x'"):
        parse_serve_args([])
