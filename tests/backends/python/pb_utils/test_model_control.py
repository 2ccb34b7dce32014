"""Model control from a model: load_model, unload_model, is_model_ready."""

from __future__ import annotations

import pytest

from backends.python.pb_utils.fake_runtime import FakeRuntime
from modelhost.backends.python import pb_utils


def test_model_control(runtime: FakeRuntime) -> None:
    pb_utils.load_model("m", config='{"backend": "python"}', files={"file:1/model.py": b"code"})
    pb_utils.load_model(model_name="n")
    pb_utils.unload_model("m", unload_dependents=True)
    assert pb_utils.is_model_ready("m", "2") is True
    assert pb_utils.is_model_ready("m") is True
    assert runtime.controls == [
        ("load", "m", {"config": '{"backend": "python"}', "files": {"file:1/model.py": b"code"}}),
        ("load", "n", {"config": "", "files": {}}),
        ("unload", "m", {"unload_dependents": True}),
        ("is_ready", "m", {"model_version": "2"}),
        ("is_ready", "m", {"model_version": ""}),
    ]
    with pytest.raises(pb_utils.TritonModelException, match=r"files should be a dictionary of file paths"):
        pb_utils.load_model("m", files=[("a", b"b")])  # type: ignore[arg-type]
    with pytest.raises(pb_utils.TritonModelException, match=r"version should be an integral value > 0"):
        pb_utils.is_model_ready("m", "latest")
    runtime.fail_with = "failed to load 'm'"
    with pytest.raises(pb_utils.TritonModelException, match=r"^Failed to load model: failed to load 'm'$"):
        pb_utils.load_model("m")
    with pytest.raises(pb_utils.TritonModelException, match=r"^Failed to unload model: "):
        pb_utils.unload_model("m")


def test_model_control_without_runtime() -> None:
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.is_model_ready("m")
