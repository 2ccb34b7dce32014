"""The flag table (cli/flags.py): every tritonserver flag known, refused and ignored flags, and the help and
docs made from the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.fake_app import FakeApp
from modelhost.cli.docs import flags_markdown
from modelhost.cli.errors import CliError
from modelhost.cli.flags import FLAGS, Flag, Status
from modelhost.cli.main import main
from modelhost.cli.serve_args import parse_serve_args
from modelhost.options import ServerOptions

pytestmark = pytest.mark.usefixtures("restore_logging")

IGNORED = [f for f in FLAGS if f.status is Status.IGNORED]
REFUSED = [f for f in FLAGS if f.status is Status.REFUSED]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def refused_value(flag: Flag) -> str:
    """A value of the flag's kind that modelhost does not honour."""
    candidates = {"bool": ["true", "false"], "int": ["12345", "0"], "float": ["1.5"]}.get(flag.kind, ["x"])
    return next(value for value in candidates if not flag.accepts(value))


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


# --- Help and docs


def test_serve_help_documents_every_flag_with_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in FLAGS:
        assert flag.option in out
    assert "(default: 8000)" in out
    assert "[ignored:" in out
    assert "[not supported yet; accepted: 2147483647]" in out


def test_docs_hold_the_current_flag_tables() -> None:
    # Regenerate with: python -c "from modelhost.cli.docs import flags_markdown; print(flags_markdown())"
    assert flags_markdown() in DOCS.read_text(encoding="utf-8")
