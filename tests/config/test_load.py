from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import text_format  # type: ignore[import-untyped]
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from modelhost.backends.model_config import complete_model_config, load_model_config
from modelhost.config import config_from_json
from modelhost.errors import ModelConfigError

from .conftest import ModelFactory

PYTHON_IO = """
input [ { name: "IN" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""


def _python_model(repo: Path, name: str, config_text: str | None) -> Path:
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text("class TritonPythonModel: ...\n")
    if config_text is not None:
        (model_dir / "config.pbtxt").write_text(config_text)
    return model_dir


def test_model_config_name_selects_configs_file(make_model: ModelFactory) -> None:
    model_dir = make_model("simple", "max_batch_size: 2")
    (model_dir / "configs").mkdir()
    (model_dir / "configs" / "big.pbtxt").write_text("max_batch_size: 32")
    assert load_model_config(model_dir, config_name="big").max_batch_size == 32
    assert load_model_config(model_dir, config_name="absent").max_batch_size == 2
    assert load_model_config(model_dir).max_batch_size == 2


def test_name_mismatch_names_the_file(make_model: ModelFactory) -> None:
    model_dir = make_model("simple", 'name: "other"')
    with pytest.raises(ModelConfigError) as info:
        load_model_config(model_dir)
    message = str(info.value)
    assert "unexpected directory name 'simple' for model 'other'" in message
    assert str(model_dir / "config.pbtxt") in message


def test_parse_error_names_file_and_line(make_model: ModelFactory) -> None:
    model_dir = make_model(
        "simple", 'name: "simple"\ninput [ { name: "A" data_type: TYPE_FP32 dims: [ 1 ] ]\n'
    )
    with pytest.raises(ModelConfigError, match=r"config\.pbtxt for model 'simple': 2:\d+ ") as info:
        load_model_config(model_dir)
    assert "failed to read text proto from" in str(info.value)


def test_empty_config_file_is_auto_completed(make_model: ModelFactory) -> None:
    from_empty_file = load_model_config(make_model("simple", ""))
    without_file = load_model_config(make_model("other"))
    without_file.name = without_file.instance_group[0].name = "simple"
    assert from_empty_file == without_file


def test_no_config_and_auto_complete_disabled(make_model: ModelFactory) -> None:
    model_dir = make_model("simple")
    with pytest.raises(ModelConfigError) as info:
        load_model_config(model_dir, auto_complete=False)
    message = str(info.value)
    assert (
        f"failed to open text file for read {model_dir / 'config.pbtxt'}: No such file or directory"
        in message
    )
    assert "auto-complete is disabled" in message


def test_python_model(repo: Path) -> None:
    config = load_model_config(_python_model(repo, "py", 'backend: "python"' + PYTHON_IO))
    assert (config.backend, config.platform, config.default_model_filename) == ("python", "", "model.py")
    assert [(g.name, g.count, g.kind) for g in config.instance_group] == [
        ("py", 1, ModelInstanceGroup.KIND_CPU)
    ]


def test_python_model_without_config_is_inferred(repo: Path) -> None:
    config = load_model_config(_python_model(repo, "py", None))
    assert config.backend == "python"
    assert len(config.input) == 0  # the python backend's own auto_complete_config fills these later


def test_kind_gpu_on_cpu_only_server(repo: Path) -> None:
    text = 'backend: "python" instance_group [ { kind: KIND_GPU } ]' + PYTHON_IO
    with pytest.raises(ModelConfigError, match="has kind KIND_GPU but no GPUs are available"):
        load_model_config(_python_model(repo, "py", text))
    assert load_model_config(
        _python_model(repo, "py2", text.replace("py", "py2")), gpu_count=1
    ).instance_group[0].gpus == [0]


def test_core_errors_come_before_autofill(make_model: ModelFactory) -> None:
    with pytest.raises(ModelConfigError, match="'max_batch_size' must be non-negative value for simple"):
        load_model_config(make_model("simple", "max_batch_size: -1"))


def test_config_override_completed_like_a_file(make_model: ModelFactory) -> None:
    model_dir = make_model("simple")
    override = config_from_json('{"max_batch_size": 8}', "simple")
    config = complete_model_config(override, model_dir, source="load request override")
    assert config.max_batch_size == 8
    assert list(config.dynamic_batching.preferred_batch_size) == [8]
    assert override.backend == ""  # the argument is not modified


def test_override_error_names_source(make_model: ModelFactory) -> None:
    model_dir = make_model("simple")
    with pytest.raises(ModelConfigError, match=r"\(in load request override\)"):
        complete_model_config(ModelConfig(name="x"), model_dir, source="load request override")


def test_loaded_config_is_stable(make_model: ModelFactory) -> None:
    """Completing an already completed config changes nothing (GET config -> load override -> same config)."""
    model_dir = make_model("simple")
    config = load_model_config(model_dir)
    again = complete_model_config(config, model_dir, source="again")
    assert again == config
    text = text_format.MessageToString(config)
    assert json.loads(json.dumps({"t": text}))["t"] == text
