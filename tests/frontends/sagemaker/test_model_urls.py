"""Which model a multi-model load's url names, and the urls refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelhost.errors import InvalidArgument
from modelhost.frontends.sagemaker.model_urls import locate_model


def _model(path: Path, config: str = 'backend: "onnxruntime"\n') -> None:
    (path / "1").mkdir(parents=True)
    (path / "config.pbtxt").write_text(config)


def test_a_model_at_the_url_itself(tmp_path: Path) -> None:
    _model(tmp_path / "abc" / "model")
    found = locate_model(f"{tmp_path}/abc/model", str(tmp_path))
    assert found.model_dir == tmp_path / "abc" / "model"
    assert found.model_url == f"{tmp_path}/abc"  # Triton's repository path
    assert found.companions == {}


def test_a_model_of_version_directories_only(tmp_path: Path) -> None:
    (tmp_path / "abc" / "model" / "1").mkdir(parents=True)
    assert locate_model(f"{tmp_path}/abc/model/", str(tmp_path)).model_dir == tmp_path / "abc" / "model"


def test_the_one_model_directory_under_the_url(tmp_path: Path) -> None:
    _model(tmp_path / "abc" / "model" / "resnet")
    found = locate_model(f"{tmp_path}/abc/model", str(tmp_path))
    assert found.model_dir == tmp_path / "abc" / "model" / "resnet"
    assert found.model_url == f"{tmp_path}/abc/model"


def test_the_ensemble_among_several_with_its_companions(tmp_path: Path) -> None:
    url = tmp_path / "abc" / "model"
    _model(url / "pre")
    _model(url / "ens", 'platform:  "ensemble"\n')
    _model(url / "post")
    found = locate_model(str(url), str(tmp_path))
    assert found.model_dir == url / "ens"
    assert found.companions == {"pre": url / "pre", "post": url / "post"}


def test_a_subdirectory_in_the_url(tmp_path: Path) -> None:
    _model(tmp_path / "abc" / "model" / "v2")
    assert (
        locate_model(f"{tmp_path}/abc/model/v2", str(tmp_path)).model_dir == tmp_path / "abc" / "model" / "v2"
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (None, "the load request has no 'url'"),
        (3, "Unable to parse 'url'"),
        ("", "expected a path of the form ROOT/<hash>/model[/<subdir>]"),
        ("abc/model", "expected a path of the form"),
        ("ROOT/abc/../../etc/model", "'.' and '..' are not allowed"),
        ("ROOT/./abc/model", "'.' and '..' are not allowed"),
        ("/proc/1/model", "/dev, /proc and /sys hold no models"),
        ("//sys/model", "/dev, /proc and /sys hold no models"),
        ("ROOT/ab-c/model", "expected a path of the form"),
        ("ROOT/abc/weights", "expected a path of the form"),
        ("ROOT/abc/model/a/b", "expected a path of the form"),
        ("ROOT/missing/model", "no such directory"),
    ],
)
def test_refused_urls(tmp_path: Path, url: object, message: str) -> None:
    if isinstance(url, str):
        url = url.replace("ROOT", str(tmp_path))
    with pytest.raises(InvalidArgument) as error:
        locate_model(url, str(tmp_path))
    assert message.replace("ROOT", str(tmp_path)) in str(error.value)


def test_no_model_and_several_models_are_refused(tmp_path: Path) -> None:
    (tmp_path / "empty" / "model").mkdir(parents=True)
    with pytest.raises(InvalidArgument, match="holds no model directory"):
        locate_model(f"{tmp_path}/empty/model", str(tmp_path))
    _model(tmp_path / "two" / "model" / "a")
    _model(tmp_path / "two" / "model" / "b")
    with pytest.raises(InvalidArgument, match=r"several model directories \(a, b\) and none is an ensemble"):
        locate_model(f"{tmp_path}/two/model", str(tmp_path))
    _model(tmp_path / "ens2" / "model" / "a", 'platform: "ensemble"')
    _model(tmp_path / "ens2" / "model" / "b", 'platform: "ensemble"')
    with pytest.raises(InvalidArgument, match=r"several ensembles \(a, b\)"):
        locate_model(f"{tmp_path}/ens2/model", str(tmp_path))
