"""The `modelhost` command (cli/main.py): its commands, help and version, and `modelhost serve` running the server."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import modelhost
from cli.fake_app import FakeApp
from modelhost.cli.main import bundled_examples, main
from modelhost.options import ServerOptions

pytestmark = pytest.mark.usefixtures("restore_logging")

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


# --- Commands, help and version


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


# --- Convert and compatibility


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
