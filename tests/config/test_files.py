from __future__ import annotations

from pathlib import Path

import pytest

from modelhost.config.files import config_path, parse_config_text, read_config
from modelhost.errors import ModelConfigError


def test_config_path_prefers_named_config(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "config.pbtxt").write_text('name: "m"')
    (tmp_path / "configs" / "h100.pbtxt").write_text('name: "m"')
    assert config_path(tmp_path, "h100") == tmp_path / "configs" / "h100.pbtxt"


def test_config_path_falls_back_to_default(tmp_path: Path) -> None:
    (tmp_path / "config.pbtxt").write_text('name: "m"')
    assert config_path(tmp_path, "missing") == tmp_path / "config.pbtxt"
    assert config_path(tmp_path, None) == tmp_path / "config.pbtxt"


def test_config_path_none_without_files(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "other.pbtxt").write_text("")
    assert config_path(tmp_path, None) is None
    assert config_path(tmp_path, "h100") is None


def test_read_config_parses_text_format(tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_text(
        'name: "m"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        "input [ { name: 'X' data_type: TYPE_FP32 dims: [ -1, 3 ] } ]\n"
    )
    config = read_config(path, "m")
    assert config.name == "m"
    assert config.max_batch_size == 8
    assert list(config.input[0].dims) == [-1, 3]


def test_parse_error_names_model_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_text('name: "m"\nmax_batch_size: 8\nmax_batch: 3\n')
    with pytest.raises(ModelConfigError) as info:
        read_config(path, "m")
    message = str(info.value)
    assert str(path) in message
    assert "'m'" in message
    assert "3:1" in message
    assert "max_batch" in message


def test_parse_error_bad_enum_value() -> None:
    with pytest.raises(ModelConfigError, match=r"1:\d+ .*TYPE_FOO"):
        parse_config_text('input { name: "a" data_type: TYPE_FOO }', "m", "inline")


def test_parse_error_repeated_singular_field() -> None:
    with pytest.raises(ModelConfigError, match='multiple "name" fields'):
        parse_config_text('name: "a" name: "b"', "m", "inline")


def test_read_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match=r"failed to open text file for read .*No such file"):
        read_config(tmp_path / "config.pbtxt", "m")


def test_read_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_bytes(b'name: "\xff"')
    with pytest.raises(ModelConfigError, match="UTF-8"):
        read_config(path, "m")
