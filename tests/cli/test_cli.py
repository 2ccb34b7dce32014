from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
import types
from pathlib import Path

import pytest

import modelhost
from modelhost.cli.docs import flags_markdown
from modelhost.cli.flags import FLAGS, Flag, Status
from modelhost.cli.main import CliError, _parse_serve, bundled_examples, main, parse_serve_args
from modelhost.options import ServerOptions, auto_frontend_processes

pytestmark = pytest.mark.usefixtures("restore_logging")

HONOURED = [f for f in FLAGS if f.status is Status.HONOURED]
IGNORED = [f for f in FLAGS if f.status is Status.IGNORED]
REFUSED = [f for f in FLAGS if f.status is Status.REFUSED]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


class FakeApp:
    """Stands in for modelhost.app: records the options run_server was given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, code: int = 0) -> None:
        self.calls: list[ServerOptions] = []
        self.code = code
        module = types.ModuleType("modelhost.app")
        module.run_server = self.run_server  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "modelhost.app", module)

    def run_server(self, options: ServerOptions) -> int:
        self.calls.append(options)
        return self.code


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> FakeApp:
    return FakeApp(monkeypatch)


def refused_value(flag: Flag) -> str:
    """A value of the flag's kind that modelhost does not honour."""
    candidates = {"bool": ["true", "false"], "int": ["12345", "0"], "float": ["1.5"]}.get(flag.kind, ["x"])
    return next(value for value in candidates if not flag.accepts(value))


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
    _, notes = _parse_serve(["--strict-model-config=true"])
    assert [m for _, m in notes] == [deprecated]
    _, notes = _parse_serve(["--disable-auto-complete-config", "--strict-model-config=false"])
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


# --- Validation


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--http-port=65536"], "--http-port must be between 0 and 65535, got 65536"),
        (["--grpc-port=-1"], "--grpc-port must be between 0 and 65535, got -1"),
        (["--metrics-port=99999"], "--metrics-port must be between 0 and 65535"),
        (["--exit-timeout-secs=-1"], "--exit-timeout-secs must be 0 or more, got -1"),
        (["--http-max-input-size=0"], "--http-max-input-size must be greater than 0, got 0"),
        (["--http-max-header-size=100"], "--http-max-header-size must be 1024 or more, got 100"),
        (["--http-idle-timeout-secs=0"], "--http-idle-timeout-secs must be greater than 0, got 0"),
        (["--grpc-use-ssl=true"], "--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key"),
        (
            ["--http-use-ssl-mutual=true", "--http-server-cert=c", "--http-server-key=k"],
            "--http-use-ssl-mutual needs --http-root-cert",
        ),
        (["--http-request-timeout-secs=-1"], "--http-request-timeout-secs must be greater than 0, got -1"),
        (["--grpc-max-decompressed-size=0"], "--grpc-max-decompressed-size must be greater than 0, got 0"),
        (["--log-format=iso8601"], "--log-format must be 'default' or 'ISO8601', got 'iso8601'"),
        (["--model-config-name=a b"], "--model-config-name must be a non-empty name without spaces"),
        (["--id="], "--id must not be empty"),
        (["--http-address="], "--http-address must not be empty"),
    ],
)
def test_bad_values_are_refused_with_a_clear_message(argv: list[str], message: str) -> None:
    with pytest.raises(CliError) as raised:
        parse_serve_args(argv)
    assert message in str(raised.value)


def test_server_options_validate_themselves() -> None:
    with pytest.raises(ValueError, match="--http-port"):
        ServerOptions(http_port=70000)


# --- Backend config


def test_honoured_backend_config() -> None:
    options = parse_serve_args(
        [
            "--backend-config=default-max-batch-size=8",
            "--backend-config",
            "onnxruntime,intra_op_thread_count=2",
            "--backend-config=onnxruntime,inter_op_thread_count=1",
            "--backend-config=onnxruntime,default-max-batch-size=16",
        ]
    )
    assert options.backend_config == {
        "": {"default-max-batch-size": "8"},
        "onnxruntime": {
            "intra_op_thread_count": "2",
            "inter_op_thread_count": "1",
            "default-max-batch-size": "16",
        },
    }


def test_python_backend_settings_are_taken() -> None:
    options = parse_serve_args(
        [
            "--backend-config=python,shm-default-byte-size=4194304",
            "--backend-config=python,stub-timeout-seconds=10",
            "--backend-config=python,shm-region-prefix-name=myprefix_",
        ]
    )
    assert options.backend_config["python"] == {
        "shm-default-byte-size": "4194304",
        "stub-timeout-seconds": "10",
        "shm-region-prefix-name": "myprefix_",
    }
    with pytest.raises(CliError, match="must be a name without spaces"):
        parse_serve_args(["--backend-config=python,shm-region-prefix-name=a/b"])


def test_tensorrt_settings_reach_the_backend_as_given() -> None:
    options = parse_serve_args(
        [
            "--backend-config=tensorrt,plugins=/opt/plugins/a.so;/opt/plugins/b.so",
            "--backend-config=tensorrt,version-compatible=true",
        ]
    )
    assert options.backend_config["tensorrt"] == {
        "plugins": "/opt/plugins/a.so;/opt/plugins/b.so",
        "version-compatible": "true",
    }


@pytest.mark.parametrize(
    "setting",
    [
        "python,thread-pool-size=4",
        "onnxruntime,enable-global-threadpool=1",
        "tensorrt,gpu-memory-pool=1",
        "some-global-setting=1",
    ],
)
def test_other_backend_config_is_not_supported_yet(setting: str) -> None:
    with pytest.raises(CliError, match=r"--backend-config .* is not supported yet"):
        parse_serve_args([f"--backend-config={setting}"])


@pytest.mark.parametrize("setting", ["default-max-batch-size", ",default-max-batch-size=4", "onnxruntime,=4"])
def test_malformed_backend_config_is_refused(setting: str) -> None:
    with pytest.raises(CliError, match="--backend-config"):
        parse_serve_args([f"--backend-config={setting}"])


def test_backend_config_values_are_checked() -> None:
    with pytest.raises(CliError, match="must be an integer"):
        parse_serve_args(["--backend-config=onnxruntime,intra_op_thread_count=many"])


# --- Memory flags (what they do: tests/host/test_gpu_memory.py)


def test_memory_flags_in_tritonservers_forms() -> None:
    options = parse_serve_args(
        [
            "--cuda-memory-pool-byte-size=0:67108864",
            "--cuda-memory-pool-byte-size",
            "1:1000",
            "--model-load-gpu-limit=0:0.8",
            "--model-load-gpu-limit=1:1",
            "--model-load-gpu-limit=2:0",
        ]
    )
    assert options.cuda_memory_pool_byte_size == {0: 67108864, 1: 1000}
    assert options.model_load_gpu_limit == {0: 0.8, 1: 1.0, 2: 0.0}


def test_a_gpu_named_twice_keeps_its_last_memory_setting() -> None:
    options = parse_serve_args(["--cuda-memory-pool-byte-size=0:1", "--cuda-memory-pool-byte-size=0:2"])
    assert options.cuda_memory_pool_byte_size == {0: 2}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--pinned-memory-pool-byte-size=1GB"],
            "--pinned-memory-pool-byte-size: invalid integer value '1GB'",
        ),
        (
            ["--cuda-memory-pool-byte-size=1000"],
            "--cuda-memory-pool-byte-size format is '<gpu>:<bytes>', got '1000'",
        ),
        (["--cuda-memory-pool-byte-size=gpu0:1000"], "format is '<gpu>:<bytes>', got 'gpu0:1000'"),
        (
            ["--cuda-memory-pool-byte-size=0:64MB"],
            "--cuda-memory-pool-byte-size: invalid byte size '64MB' in '0:64MB'",
        ),
        (["--cuda-memory-pool-byte-size=0:"], "invalid byte size '' in '0:'"),
        (
            ["--cuda-memory-pool-byte-size=-1:1000"],
            "--cuda-memory-pool-byte-size expects device ID >= 0, got -1",
        ),
        (["--cuda-memory-pool-byte-size=0:-5"], "for GPU 0 must be 0 or more bytes, got -5"),
        (["--model-load-gpu-limit=0.5"], "--model-load-gpu-limit format is '<gpu>:<fraction>', got '0.5'"),
        (["--model-load-gpu-limit=0:half"], "--model-load-gpu-limit: invalid fraction 'half' in '0:half'"),
        # tritonserver's own messages (its L0_lifecycle test looks for them).
        (["--model-load-gpu-limit=-1:0.6"], "--model-load-gpu-limit expects device ID >= 0, got -1"),
        (["--model-load-gpu-limit=0:-0.4"], "expects limit fraction to be in range [0.0, 1.0], got -0.4"),
        (["--model-load-gpu-limit=0:1.5"], "expects limit fraction to be in range [0.0, 1.0], got 1.5"),
        (["--model-load-gpu-limit=0:nan"], "expects limit fraction to be in range [0.0, 1.0], got nan"),
    ],
)
def test_bad_memory_flag_values_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(CliError) as raised:
        parse_serve_args(argv)
    assert message in str(raised.value)


def test_memory_flags_are_accepted_on_the_command_line(app: FakeApp, tmp_path: Path) -> None:
    argv = [
        "--pinned-memory-pool-byte-size=0",
        "--cuda-memory-pool-byte-size=0:1000",
        "--model-load-gpu-limit=0:1",
    ]
    assert main(["serve", f"--model-repository={tmp_path}", *argv]) == 0
    assert app.calls[0].cuda_memory_pool_byte_size == {0: 1000}


# --- Refused and ignored flags


@pytest.mark.parametrize("flag", REFUSED, ids=lambda f: f.name)
def test_refused_flag_ends_with_exit_2(flag: Flag, app: FakeApp, capsys: pytest.CaptureFixture[str]) -> None:
    value = refused_value(flag)
    with pytest.raises(CliError, match=f"^{flag.option} is not supported yet"):
        parse_serve_args([f"{flag.option}={value}"])
    assert main(["serve", flag.option, value]) == 2
    assert f"modelhost: error: {flag.option} is not supported yet" in capsys.readouterr().err
    assert app.calls == []


ACCEPTED = [(flag, value) for flag in REFUSED for value in flag.accepted]


@pytest.mark.parametrize(("flag", "value"), ACCEPTED, ids=[f"{f.name}={v}" for f, v in ACCEPTED])
def test_refused_flag_with_the_value_modelhost_honours_anyway_is_accepted(flag: Flag, value: str) -> None:
    assert parse_serve_args([f"{flag.option}={value}"]) == ServerOptions()


@pytest.mark.parametrize(
    "argv",
    [
        ["--rate-limit", "OFF"],
        ["--allow-sagemaker=0", "--allow-vertex-ai=off", "--allow-client-shm=FALSE"],
        ["--log-verbose=false"],
        ["--model-namespacing=off", "--reuse-http-port=0", "--grpc-use-ssl=false"],
        ["--grpc-keepalive-time=7200000"],
    ],
)
def test_accepted_values_in_any_bool_or_case_form(argv: list[str]) -> None:
    assert parse_serve_args(argv) == ServerOptions()


def test_every_refused_default_that_is_accepted_is_tritonservers_default_or_off() -> None:
    # Guard against accepting a value that changes behaviour: the accepted values are the documented default
    # or a value switching the feature off.
    for flag in REFUSED:
        for value in flag.accepted:
            assert value in (flag.default, "false", "0", "level=OFF"), flag.name


@pytest.mark.parametrize("flag", IGNORED, ids=lambda f: f.name)
def test_ignored_flag_is_accepted_and_logged(
    flag: Flag, app: FakeApp, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    value = flag.default if flag.kind != "bool" else "false"
    assert parse_serve_args([f"{flag.option}={value}"]) == ServerOptions()
    assert main(["serve", f"--model-repository={tmp_path}", f"{flag.option}={value}"]) == 0
    err = capsys.readouterr().err
    assert f"{flag.option} is ignored: " in err
    assert len(app.calls) == 1


def test_ignored_flag_values_are_still_checked() -> None:
    with pytest.raises(CliError, match="--http-thread-count: invalid integer value"):
        parse_serve_args(["--http-thread-count=many"])


def test_the_issue_lists_repoagent_and_cache_directories_as_ignored() -> None:
    ignored = {f.name for f in IGNORED}
    assert {"repoagent-directory", "cache-directory"} <= ignored
    assert "backend-directory" not in ignored  # python-based backends are found there


def test_backend_directory_is_parsed() -> None:
    assert parse_serve_args(["--backend-directory=/srv/backends"]).backend_directory == "/srv/backends"


# tritonserver 2.5x's flags (reference/triton.md section 1 and `tritonserver --help`).
TRITONSERVER_FLAGS = """
id exit-timeout-secs log-verbose log-info log-warning log-error log-format log-file model-store
model-repository exit-on-error disable-auto-complete-config strict-readiness model-control-mode
repository-poll-secs load-model model-config-name model-load-thread-count model-load-retry-count
model-namespacing enable-peer-access allow-http http-address http-port reuse-http-port
http-header-forward-pattern http-thread-count http-restricted-api http-max-input-size allow-grpc
grpc-address grpc-port reuse-grpc-port grpc-header-forward-pattern grpc-infer-thread-count
grpc-infer-allocation-pool-size grpc-max-response-pool-size grpc-use-ssl grpc-use-ssl-mutual
grpc-server-cert grpc-server-key grpc-root-cert grpc-infer-response-compression-level grpc-keepalive-time
grpc-keepalive-timeout grpc-keepalive-permit-without-calls grpc-http2-max-pings-without-data
grpc-http2-min-recv-ping-interval-without-data grpc-http2-max-ping-strikes grpc-max-connection-age
grpc-max-connection-age-grace grpc-restricted-protocol allow-sagemaker sagemaker-port
sagemaker-safe-port-range sagemaker-thread-count allow-vertex-ai vertex-ai-port vertex-ai-thread-count
vertex-ai-default-model allow-metrics allow-gpu-metrics allow-cpu-metrics metrics-address metrics-port
metrics-interval-ms metrics-config trace-config backend-directory backend-config repoagent-directory
cache-config cache-directory rate-limit rate-limit-resource pinned-memory-pool-byte-size
cuda-memory-pool-byte-size cuda-virtual-address-size min-supported-compute-capability
buffer-manager-thread-count host-policy model-load-gpu-limit allow-client-shm strict-model-config
response-cache-byte-size trace-file trace-level trace-rate trace-count trace-log-frequency
"""


# Flags of modelhost's own, beyond tritonserver's.
MODELHOST_FLAGS = [
    "frontend-processes",
    "frontend-buffer-byte-size",
    "model-memory-budget",
    "model-load-on-demand",
    "model-idle-unload-secs",
    "http-max-header-size",
    "http-idle-timeout-secs",
    "http-request-timeout-secs",
    "grpc-max-decompressed-size",
    "grpc-idle-timeout-secs",
    "grpc-request-timeout-secs",
    "http-max-connections",
    "grpc-max-connections",
    "http-use-ssl",
    "http-use-ssl-mutual",
    "http-server-cert",
    "http-server-key",
    "http-root-cert",
    "http-console",
]


def test_every_tritonserver_flag_is_known() -> None:
    tritonserver = TRITONSERVER_FLAGS.split()
    assert sorted(tritonserver + MODELHOST_FLAGS) == sorted(f.name for f in FLAGS)


# --- Commands, help and version


def test_serve_help_documents_every_flag_with_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in FLAGS:
        assert flag.option in out
    assert "(default: 8000)" in out
    assert "[ignored:" in out
    assert "[not supported yet; accepted: 2147483647]" in out


def test_top_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "serve" in out
    assert "modelhost serve --help" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert modelhost.__version__ in out
    assert modelhost.TRITON_COMPAT_VERSION in out


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "serve" in capsys.readouterr().err


def test_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serv"]) == 2
    assert "modelhost: error:" in capsys.readouterr().err


def test_tritonserver_style_command_line_gets_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model-repository=/models"]) == 2
    assert "modelhost serve --model-repository=/models" in capsys.readouterr().err


# --- Running


def test_serve_runs_the_server_with_the_parsed_options(app: FakeApp, tmp_path: Path) -> None:
    assert main(["serve", f"--model-repository={tmp_path}", "--http-port=9000", "--log-info=false"]) == 0
    assert app.calls == [ServerOptions(model_repositories=[str(tmp_path)], http_port=9000, log_info=False)]


def test_serve_returns_the_servers_exit_code(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    FakeApp(monkeypatch, code=1)
    assert main(["serve", f"--model-repository={tmp_path}"]) == 1


def test_serve_without_repository_serves_the_bundled_examples(
    app: FakeApp, capsys: pytest.CaptureFixture[str]
) -> None:
    if not bundled_examples().is_dir():
        pytest.skip("no bundled examples in this checkout")
    assert main(["serve"]) == 0
    assert app.calls[0].model_repositories == [str(bundled_examples())]
    assert (app.calls[0].http_port, app.calls[0].grpc_port, app.calls[0].metrics_port) == (8000, 8001, 8002)
    assert "serving the bundled examples" in capsys.readouterr().err


def test_bundled_examples_live_in_the_package() -> None:
    assert bundled_examples() == Path(modelhost.__file__).parent / "examples"


def test_serve_configures_logging_first(app: FakeApp, tmp_path: Path) -> None:
    log_file = tmp_path / "server.log"
    assert (
        main(["serve", f"--model-repository={tmp_path}", f"--log-file={log_file}", "--http-thread-count=2"])
        == 0
    )
    assert "--http-thread-count is ignored" in log_file.read_text()


def test_unwritable_log_file_is_a_usage_error(
    app: FakeApp, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["serve", f"--model-repository={tmp_path}", f"--log-file={tmp_path / 'no' / 'such.log'}"]) == 2
    )
    assert "modelhost: error: cannot open --log-file" in capsys.readouterr().err
    assert app.calls == []


# --- Docs


def test_docs_hold_the_current_flag_tables() -> None:
    # Regenerate with: python -c "from modelhost.cli.docs import flags_markdown; print(flags_markdown())"
    assert flags_markdown() in DOCS.read_text(encoding="utf-8")


# --- --frontend-processes


def test_frontend_processes_auto_follows_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)))
    assert parse_serve_args(["--frontend-processes=auto"]).frontend_processes == auto_frontend_processes(16)
    assert parse_serve_args(["--frontend-processes", "AUTO"]).frontend_processes == 8


@pytest.mark.parametrize(("cores", "expected"), [(1, 0), (2, 0), (3, 2), (4, 3), (9, 8), (64, 8)])
def test_auto_frontend_processes_rule(cores: int, expected: int) -> None:
    assert auto_frontend_processes(cores) == expected


@pytest.mark.parametrize("value", ["many", "-1", "65", "1.5"])
def test_frontend_processes_refuses_what_is_not_a_count(value: str) -> None:
    with pytest.raises(CliError, match="--frontend-processes"):
        parse_serve_args([f"--frontend-processes={value}"])


def test_frontend_buffer_must_hold_something() -> None:
    with pytest.raises(CliError, match="--frontend-buffer-byte-size must be 1 or more"):
        parse_serve_args(["--frontend-buffer-byte-size=0"])


# --- The memory budget, on-demand loading and the SageMaker listener


@pytest.mark.parametrize(
    ("text", "size"),
    [("1024", 1024), ("512MiB", 512 << 20), ("4GB", 4 * 10**9), ("1.5 GiB", 3 << 29), ("2k", 2000)],
)
def test_memory_budget_sizes(text: str, size: int) -> None:
    assert parse_serve_args([f"--model-memory-budget={text}"]).model_memory_budget == size


def test_memory_budget_as_a_percentage_of_ram() -> None:
    from modelhost.engine.registry.model_memory import total_ram

    budget = parse_serve_args(["--model-memory-budget=50%"]).model_memory_budget
    assert budget == total_ram() // 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lots", "'lots' is not a size"),
        ("0", "must be more than 0 bytes"),
        ("150%", "at most 100"),
        ("5 parsecs", "unknown unit 'parsecs'"),
    ],
)
def test_bad_memory_budget_is_refused(text: str, message: str) -> None:
    with pytest.raises(CliError, match=re.escape(message)):
        parse_serve_args([f"--model-memory-budget={text}"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--model-load-on-demand=true"],
            "--model-load-on-demand=true requires --model-control-mode=explicit",
        ),
        (["--model-idle-unload-secs=5"], "--model-idle-unload-secs requires --model-control-mode=explicit"),
        (
            ["--allow-sagemaker=true", "--sagemaker-safe-port-range=9000-9100"],
            "--http-port 8000 is outside --sagemaker-safe-port-range 9000-9100",
        ),
        (["--allow-sagemaker=true", "--sagemaker-safe-port-range=90"], "format is '<low>-<high>'"),
        (["--allow-sagemaker=true", "--sagemaker-port=8000"], "HTTP requests and SageMaker requests"),
        (["--log-verbose=maybe"], "invalid integer value"),
    ],
)
def test_memory_and_sagemaker_flag_problems(argv: list[str], message: str) -> None:
    with pytest.raises(CliError, match=re.escape(message)):
        parse_serve_args(argv)


def test_log_verbose_takes_true_and_false_as_tritonserver_does() -> None:
    assert parse_serve_args(["--log-verbose=true"]).log_verbose == 1
    assert parse_serve_args(["--log-verbose=false"]).log_verbose == 0


def test_convert_lists_the_converters(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert", "--help"]) == 0
    assert "onnx-to-tensorrt" in capsys.readouterr().out
    assert main(["convert"]) == 2


def test_an_unknown_converter_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert", "onnx-to-openvino"]) == 2
    assert "unknown converter 'onnx-to-openvino' (converters: onnx-to-tensorrt)" in capsys.readouterr().err


def test_onnx_to_tensorrt_without_tensorrt_says_what_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("onnx")
    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("tensorrt is installed here")
    model = tmp_path / "model.onnx"
    model.write_bytes(b"not read before tensorrt is needed")
    assert main(["convert", "onnx-to-tensorrt", "--onnx", str(model), "--opt-shapes", "x:8x4"]) == 2
    assert "pip install 'modelhost[tensorrt]'" in capsys.readouterr().err


def test_compatibility_prints_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compatibility"]) == 0
    page = capsys.readouterr().out
    assert page == (DOCS.parent / "compatibility.md").read_text(encoding="utf-8")
    assert main(["compatibility", "--write"]) == 2
    assert "compatibility takes no arguments" in capsys.readouterr().err


# --- restricted APIs (tritonserver's messages; the behaviour: tests/e2e/test_restricted_apis.py)


def test_restricted_apis_are_parsed_by_category() -> None:
    options = parse_serve_args(
        [
            "--http-restricted-api=model-repository:admin-key=admin-value",
            "--http-restricted-api=inference,metadata:infer-key=infer-value",
            "--grpc-restricted-protocol=health:k=v=w",
            "--http-restricted-api=console:console-key=yes",
        ]
    )
    assert options.http_restricted_api == {
        "model-repository": ("admin-key", "admin-value"),
        "inference": ("infer-key", "infer-value"),
        "metadata": ("infer-key", "infer-value"),
        "console": ("console-key", "yes"),
    }
    assert options.grpc_restricted_protocol == {"health": ("triton-grpc-protocol-k", "v=w")}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            [
                "--http-restricted-api=model-repository,health:k1=v1",
                "--http-restricted-api=metadata,health:k2=v2",
            ],
            "restricted api 'health' can not be specified in multiple config groups",
        ),
        (["--http-restricted-api=model-reposit,health:k1=v1"], "unknown restricted api 'model-reposit'"),
        (
            ["--grpc-restricted-protocol=health:k1=v1", "--grpc-restricted-protocol=health:k2=v2"],
            "restricted protocol 'health' can not be specified in multiple config groups",
        ),
        (["--grpc-restricted-protocol=model-reposit:k1=v1"], "unknown restricted protocol 'model-reposit'"),
        # The web console is HTTP's alone.
        (["--grpc-restricted-protocol=console:k1=v1"], "unknown restricted protocol 'console'"),
        (
            ["--http-restricted-api=health"],
            "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got health",
        ),
        (
            ["--grpc-restricted-protocol=health:=v"],
            "--grpc-restricted-protocol option format is '<config name>:<setting>=<value>'. Got health:=v",
        ),
    ],
)
def test_mistakes_in_restricted_apis_are_refused_in_tritons_words(flags: list[str], message: str) -> None:
    with pytest.raises(CliError, match=re.escape(message)):
        parse_serve_args(flags)


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
