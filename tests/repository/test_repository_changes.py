"""Fingerprints (what a poll compares) and load overrides (what a load request may write)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from modelhost.errors import InvalidArgument
from modelhost.repository.fingerprint import fingerprint
from modelhost.repository.overrides import check_model_name, parse_load_parameters, write_model_files


def make_model(root: Path) -> Path:
    model = root / "m"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.onnx").write_bytes(b"one")
    (model / "config.pbtxt").write_text('platform: "onnxruntime_onnx"')
    return model


def touch_later(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def test_unchanged_directory_has_the_same_fingerprint(tmp_path: Path) -> None:
    model = make_model(tmp_path)
    assert fingerprint(model) == fingerprint(model)


def test_a_version_change_is_seen_in_that_version_only(tmp_path: Path) -> None:
    model = make_model(tmp_path)
    before = fingerprint(model)
    touch_later(model / "1" / "model.onnx")
    after = fingerprint(model)
    assert after.shared == before.shared
    assert after.versions[1] != before.versions[1]


def test_a_config_change_is_a_shared_change(tmp_path: Path) -> None:
    model = make_model(tmp_path)
    before = fingerprint(model)
    (model / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\nmax_batch_size: 2')
    after = fingerprint(model)
    assert after.shared != before.shared
    assert after.versions == before.versions


def test_new_and_empty_version_directories_appear(tmp_path: Path) -> None:
    model = make_model(tmp_path)
    (model / "2").mkdir()
    (model / "latest").mkdir()  # not a version
    assert sorted(fingerprint(model).versions) == [1, 2]


def test_python_bytecode_caches_are_not_changes(tmp_path: Path) -> None:
    model = make_model(tmp_path)
    before = fingerprint(model)
    (model / "1" / "__pycache__").mkdir()
    (model / "1" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"x")
    assert fingerprint(model) == before


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_load_parameters_over_http_and_grpc() -> None:
    http = parse_load_parameters({"config": "{}", "file:1/model.onnx": b64(b"abc")}, files_base64=True)
    grpc = parse_load_parameters({"config": "{}", "file:1/model.onnx": b"abc"}, files_base64=False)
    assert http.files == grpc.files == {"1/model.onnx": b"abc"}
    assert http.config_json == "{}"
    assert parse_load_parameters({}, files_base64=True).empty


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"file:1/model.onnx": b64(b"x")}, "requires a 'config'"),
        ({"config": "{}", "file:../x": b64(b"x")}, "within model directory"),
        ({"config": "{}", "file:1/../../x": b64(b"x")}, "within model directory"),
        ({"config": "{}", "file:/etc/passwd": b64(b"x")}, "within model directory"),
        ({"config": "{}", "file:": b64(b"x")}, "within model directory"),
        ({"config": "{}", "file:a\\b": b64(b"x")}, "within model directory"),
        ({"config": "{}", "file:1/a": "not base64!"}, "not valid base64"),
        ({"config": "{}", "file:1/a": 5}, "must be a base64 string"),
        ({"config": 5}, "must be a string"),
        ({"bogus": "x"}, "Unrecognized load parameter 'bogus'"),
    ],
)
def test_bad_load_parameters(parameters: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message.replace("\\", "\\\\").replace("(", "\\(")):
        parse_load_parameters(parameters, files_base64=True)


@pytest.mark.parametrize("name", ["", " ", "a/b", "a\\b", "..", "."])
def test_bad_model_names(name: str) -> None:
    with pytest.raises(InvalidArgument):
        check_model_name(name)


def test_override_files_are_written_in_a_private_directory_and_removed() -> None:
    holder, model_dir = write_model_files("m", {"1/model.onnx": b"abc", "labels.txt": b"a\nb"})
    try:
        assert model_dir.name == "m"
        assert (model_dir / "1" / "model.onnx").read_bytes() == b"abc"
        assert (model_dir / "labels.txt").read_text() == "a\nb"
        assert oct(Path(holder.name).stat().st_mode & 0o777) == "0o700"
    finally:
        holder.cleanup()
    assert not model_dir.exists()


def test_an_override_file_that_is_also_a_directory_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="failed to write the file overrides"):
        write_model_files("m", {"1": b"a", "1/model.onnx": b"b"})
