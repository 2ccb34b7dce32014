"""`modelhost convert onnx-to-tensorrt` without a GPU: trtexec's shape syntax, where the plan and config go,
the config written for an engine, and the exit status and message when the tensorrt package is missing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from trt_fakes import batch_engine, write_plan

from modelhost.backends.model_config import load_model_config
from modelhost.backends.tensorrt.convert import config_location, config_text, main, plan_config, plan_path
from modelhost.backends.tensorrt.engine import ProfileShapes
from modelhost.backends.tensorrt.shape_spec import (
    ShapeSpecError,
    build_profile,
    check_against_network,
    parse_shapes,
)

# -- shape specs ---------------------------------------------------------------------------------------------


def test_trtexec_shape_syntax() -> None:
    assert parse_shapes("input:1x3x224x224,mask:1x16") == {"input": (1, 3, 224, 224), "mask": (1, 16)}
    assert parse_shapes(" a:4 , b:2X3 ") == {"a": (4,), "b": (2, 3)}
    assert parse_shapes("input:0:8x3") == {"input:0": (8, 3)}  # the shape follows the last ':'
    assert parse_shapes("'in,put:0':8x3,b:1") == {"in,put:0": (8, 3), "b": (1,)}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("input", "is not name:shape"),
        ("input:", "gives no shape"),
        ("input:1x3xa", "integers joined by 'x'"),
        ("input:1x-3", "dimensions must be 0 or more"),
        ("a:1,a:2", "input 'a' is given twice"),
        ("'a:1", "unbalanced quote"),
        ("'a'1x2", "a quoted name must be followed by ':'"),
    ],
)
def test_bad_shape_specs_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ShapeSpecError, match=message):
        parse_shapes(text)


def test_a_profile_from_min_opt_and_max() -> None:
    profile = build_profile("x:1x3", "x:8x3", "x:32x3")
    assert profile == {"x": ProfileShapes((1, 3), (8, 3), (32, 3))}


def test_opt_alone_is_a_fixed_shape_and_no_flag_no_profile() -> None:
    assert build_profile(None, "x:4x3", None) == {"x": ProfileShapes((4, 3), (4, 3), (4, 3))}
    assert build_profile(None, None, None) == {}


@pytest.mark.parametrize(
    ("low", "opt", "high", "message"),
    [
        ("x:1x3", None, "x:8x3", "give all three"),
        ("x:1x3", "x:4x3", "y:8x3", "must name the same inputs"),
        ("x:1x3", "x:4x3", "x:8x3x1", "the same number of dimensions"),
        ("x:1x3", "x:16x3", "x:8x3", "min <= opt <= max"),
    ],
)
def test_inconsistent_profiles_are_refused(low: str, opt: str | None, high: str, message: str) -> None:
    with pytest.raises(ShapeSpecError, match=message):
        build_profile(low, opt, high)


def test_the_profile_must_fit_the_network() -> None:
    inputs = [("x", (-1, 3)), ("w", (2, 2))]
    check_against_network({"x": ProfileShapes((1, 3), (4, 3), (8, 3))}, inputs)
    with pytest.raises(ShapeSpecError, match=r"input 'x' has the dynamic shape \[-1,3\].*as in x:1x3"):
        check_against_network({}, inputs)
    with pytest.raises(ShapeSpecError, match=r"the ONNX model has no input \['z'\]"):
        check_against_network(
            {"x": ProfileShapes((1, 3), (1, 3), (1, 3)), "z": ProfileShapes((1,), (1,), (1,))}, inputs
        )
    with pytest.raises(
        ShapeSpecError, match=r"the max shape \[8,4\] does not fit the model's shape \[-1,3\]"
    ):
        check_against_network({"x": ProfileShapes((1, 3), (4, 3), (8, 4))}, inputs)


# -- where things go -----------------------------------------------------------------------------------------


def test_the_plan_goes_beside_the_onnx_or_where_output_says(tmp_path: Path) -> None:
    onnx = tmp_path / "m.onnx"
    assert plan_path(onnx, None) == tmp_path / "model.plan"
    assert plan_path(onnx, str(tmp_path / "out.plan")) == tmp_path / "out.plan"
    assert (
        plan_path(onnx, str(tmp_path / "repo" / "m" / "1") + "/")
        == tmp_path / "repo" / "m" / "1" / "model.plan"
    )
    (tmp_path / "existing").mkdir()
    assert plan_path(onnx, str(tmp_path / "existing")) == tmp_path / "existing" / "model.plan"


def test_a_plan_in_a_version_directory_configures_its_model(tmp_path: Path) -> None:
    assert config_location(tmp_path / "repo" / "resnet" / "3" / "model.plan") == (
        (tmp_path / "repo" / "resnet" / "config.pbtxt").resolve(),
        "resnet",
    )
    assert config_location(tmp_path / "build" / "model.plan") == (
        (tmp_path / "build" / "config.pbtxt").resolve(),
        "build",
    )


def test_the_written_config_is_what_auto_complete_finds_and_loads(tmp_path: Path) -> None:
    config = plan_config("resnet", "model.plan", batch_engine(max_batch=16))
    text = config_text(config)
    assert 'name: "resnet"' in text and 'platform: "tensorrt_plan"' in text
    assert "max_batch_size: 16" in text and "dynamic_batching {" in text and "KIND_GPU" in text
    assert "default_model_filename" not in text
    # It is a complete config: it loads with auto-complete off, on a GPU host.
    model_dir = tmp_path / "resnet"
    write_plan(model_dir)
    (model_dir / "config.pbtxt").write_text(text)
    loaded = load_model_config(model_dir, auto_complete=False, gpu_count=1)
    assert [(i.name, list(i.dims)) for i in loaded.input] == [("x", [3])]
    assert list(loaded.dynamic_batching.preferred_batch_size) == [16]


def test_a_plan_not_named_model_plan_is_named_in_the_config() -> None:
    assert plan_config("m", "fp16.plan", batch_engine()).default_model_filename == "fp16.plan"


# -- the command ---------------------------------------------------------------------------------------------


def _onnx(tmp_path: Path) -> Path:
    path = tmp_path / "model.onnx"
    path.write_bytes(b"not read before tensorrt is needed")
    return path


def test_without_tensorrt_the_command_exits_2_with_the_pip_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("the tensorrt package is installed here")
    code = main(
        [
            "--onnx",
            str(_onnx(tmp_path)),
            "--min-shapes",
            "x:1x3",
            "--opt-shapes",
            "x:4x3",
            "--max-shapes",
            "x:8x3",
            "--write-config",
        ]
    )
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "modelhost convert onnx-to-tensorrt needs the Python package 'tensorrt', which is not installed; install "
        "it with: pip install 'modelhost[tensorrt]'"
    )
    assert not (tmp_path / "model.plan").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--min-shapes", "x:1x3"], "give all three"),
        (["--workspace", "0"], "--workspace must be a positive number of MiB"),
    ],
)
def test_usage_errors_exit_2_before_tensorrt_is_needed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["--onnx", str(_onnx(tmp_path)), *args]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_onnx_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--onnx", str(tmp_path / "nope.onnx")]) == 2
    assert "no ONNX model at" in capsys.readouterr().err


def test_an_existing_config_is_kept_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.pbtxt").write_text("keep me")
    assert main(["--onnx", str(_onnx(tmp_path)), "--write-config"]) == 2
    assert "config.pbtxt exists; pass --force to overwrite it" in capsys.readouterr().err
    assert (tmp_path / "config.pbtxt").read_text() == "keep me"


def test_help_and_bad_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "--max-shapes" in capsys.readouterr().out
    assert main(["--onnx"]) == 2
