"""The values of `modelhost serve`'s flags (cli/flag_values.py), and what ServerOptions checks of them: backend
config, memory flags, frontend processes, the memory budget, restricted APIs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli.fake_app import FakeApp
from modelhost.cli import flag_values
from modelhost.cli.errors import CliError, CliParser
from modelhost.cli.flags import FLAGS_BY_NAME
from modelhost.cli.main import main
from modelhost.cli.serve_args import parse_serve_args
from modelhost.options import ServerOptions, auto_frontend_processes

pytestmark = pytest.mark.usefixtures("restore_logging")


# --- One value, from its raw text


def test_values_of_each_kind() -> None:
    flag = FLAGS_BY_NAME
    assert flag_values.convert(flag["allow-http"], "OFF") is False
    assert flag_values.convert(flag["http-port"], "+9000") == 9000
    assert flag_values.convert(flag["id"], " a b ") == " a b "
    with pytest.raises(CliError, match="--http-port: invalid integer value '9k'"):
        flag_values.convert(flag["http-port"], "9k")
    assert flag_values.backend_setting("onnxruntime,a=b=c") == ("onnxruntime", "a", "b=c")
    assert flag_values.backend_setting("a=") == ("", "a", "")
    assert flag_values.cuda_pool(flag["cuda-memory-pool-byte-size"], "1:2") == (1, 2)
    assert flag_values.load_limit(flag["model-load-gpu-limit"], "0:0.5") == (0, 0.5)
    assert flag_values.port_range(flag["sagemaker-safe-port-range"], " 1-2 ") == (1, 2)
    assert flag_values.frontend_processes("3") == 3
    assert flag_values.rate_limit_resource("R1:4") == ("R1", 4, None)
    assert flag_values.TRACE_FLAGS["trace-file"] + "x" == "triton,file=x"


def test_the_parsers_errors_are_cli_errors() -> None:
    parser = CliParser(prog="modelhost x")
    parser.add_argument("--n", type=int)
    with pytest.raises(CliError, match="argument --n: invalid int value: 'x'"):
        parser.parse_args(["--n", "x"])


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
