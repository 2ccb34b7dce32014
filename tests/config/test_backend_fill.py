from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.config.backend_fill import fill_backend_fields
from modelhost.errors import ModelConfigError


def _model(tmp_path: Path, name: str, files: dict[str, str], version: str = "1") -> Path:
    model_dir = tmp_path / name
    (model_dir / version).mkdir(parents=True)
    for file, kind in files.items():
        path = model_dir / version / file
        if kind == "dir":
            path.mkdir()
        else:
            path.write_bytes(b"x")
    return model_dir


def _fill(model_dir: Path, **fields: str) -> ModelConfig:
    config = ModelConfig(**fields)
    fill_backend_fields(config, model_dir.name, model_dir)
    return config


def _fields(config: ModelConfig) -> tuple[str, str, str]:
    return config.platform, config.backend, config.default_model_filename


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"model.onnx": "file"}, ("onnxruntime_onnx", "onnxruntime", "model.onnx")),
        ({"model.onnx": "dir"}, ("onnxruntime_onnx", "onnxruntime", "model.onnx")),
        ({"model.plan": "file"}, ("tensorrt_plan", "tensorrt", "model.plan")),
        ({"model.xml": "file"}, ("", "openvino", "model.xml")),
        ({"model.pt": "file"}, ("pytorch_libtorch", "pytorch", "model.pt")),
        ({"model.py": "file"}, ("", "python", "model.py")),
        ({"model.graphdef": "file"}, ("tensorflow_graphdef", "tensorflow", "model.graphdef")),
        ({"model.savedmodel": "dir"}, ("tensorflow_savedmodel", "tensorflow", "model.savedmodel")),
        # Triton's order: TensorRT before ONNX Runtime before Python.
        ({"model.plan": "file", "model.onnx": "file"}, ("tensorrt_plan", "tensorrt", "model.plan")),
        ({"model.onnx": "file", "model.py": "file"}, ("onnxruntime_onnx", "onnxruntime", "model.onnx")),
    ],
)
def test_backend_inferred_from_files(
    tmp_path: Path, files: dict[str, str], expected: tuple[str, str, str]
) -> None:
    assert _fields(_fill(_model(tmp_path, "m", files))) == expected


def test_plan_directory_is_not_tensorrt(tmp_path: Path) -> None:
    model_dir = _model(tmp_path, "m", {"model.plan": "dir", "model.onnx": "file"})
    assert _fields(_fill(model_dir))[1] == "onnxruntime"


def test_lowest_version_with_a_model_file_decides(tmp_path: Path) -> None:
    model_dir = _model(tmp_path, "m", {"model.py": "file"}, version="3")
    (model_dir / "1").mkdir()  # empty
    (model_dir / "7").mkdir()
    (model_dir / "7" / "model.onnx").write_bytes(b"x")
    assert _fields(_fill(model_dir))[1] == "python"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"platform": "onnxruntime_onnx"}, ("onnxruntime_onnx", "onnxruntime", "model.onnx")),
        ({"backend": "onnxruntime"}, ("onnxruntime_onnx", "onnxruntime", "model.onnx")),
        ({"backend": "python"}, ("", "python", "model.py")),
        ({"platform": "pytorch_libtorch"}, ("pytorch_libtorch", "pytorch", "model.pt")),
        ({"platform": "libtorch"}, ("libtorch", "pytorch", "model.pt")),
        ({"backend": "pytorch"}, ("pytorch_libtorch", "pytorch", "model.pt")),
        ({"platform": "torch_aoti"}, ("torch_aoti", "pytorch", "model.pt2")),
        ({"platform": "tensorrt_plan"}, ("tensorrt_plan", "tensorrt", "model.plan")),
        ({"backend": "tensorrt"}, ("tensorrt_plan", "tensorrt", "model.plan")),
        ({"default_model_filename": "model.onnx"}, ("onnxruntime_onnx", "onnxruntime", "model.onnx")),
        (
            {"backend": "onnxruntime", "default_model_filename": "net.onnx"},
            ("onnxruntime_onnx", "onnxruntime", "net.onnx"),
        ),
        ({"platform": "ensemble"}, ("ensemble", "", "")),
        ({"backend": "identity"}, ("", "identity", "")),
    ],
)
def test_fields_completed_from_config(
    tmp_path: Path, given: dict[str, str], expected: tuple[str, str, str]
) -> None:
    # The version directory holds a python model: what the config says wins over the files.
    model_dir = _model(tmp_path, "m", {"model.py": "file"})
    assert _fields(_fill(model_dir, **given)) == expected


def test_custom_backend_from_model_name(tmp_path: Path) -> None:
    model_dir = _model(tmp_path, "simple.identity", {})
    assert _fields(_fill(model_dir)) == ("", "identity", "model.identity")


def test_nothing_to_infer_is_an_error(tmp_path: Path) -> None:
    model_dir = _model(tmp_path, "mystery", {"weights.bin": "file"})
    with pytest.raises(ModelConfigError, match="Could not determine backend for model 'mystery'"):
        _fill(model_dir)


def test_no_version_directory_is_an_error(tmp_path: Path) -> None:
    model_dir = tmp_path / "empty"
    model_dir.mkdir()
    with pytest.raises(ModelConfigError, match="'empty'"):
        _fill(model_dir)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        # The backends of one model file: named by any of the three fields, the others completed.
        ({"default_model_filename": "model.plan"}, ("tensorrt_plan", "tensorrt", "model.plan")),
        ({"backend": "openvino"}, ("", "openvino", "model.xml")),
        ({"default_model_filename": "model.xml"}, ("", "openvino", "model.xml")),
        ({"default_model_filename": "model.py"}, ("", "python", "model.py")),
        ({"backend": "python", "default_model_filename": "other.py"}, ("", "python", "other.py")),
        # A platform of no backend here names none of them: left for validation.
        ({"platform": "custom_platform"}, ("custom_platform", "", "")),
    ],
)
def test_one_file_backends_from_config(
    tmp_path: Path, given: dict[str, str], expected: tuple[str, str, str]
) -> None:
    model_dir = _model(tmp_path, "m", {"model.onnx": "file"})
    assert _fields(_fill(model_dir, **given)) == expected


def test_a_model_file_may_be_a_directory_unless_its_backend_wants_a_file(tmp_path: Path) -> None:
    assert _fields(_fill(_model(tmp_path, "xml", {"model.xml": "dir"})))[1] == "openvino"
    assert _fields(_fill(_model(tmp_path, "py", {"model.py": "dir"})))[1] == "python"
    with pytest.raises(ModelConfigError, match="Could not determine backend for model 'plan'"):
        _fill(_model(tmp_path, "plan", {"model.plan": "dir"}))
