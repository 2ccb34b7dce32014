"""The runtime seam: installed and removed by the stub; get_model_dir() once the stub has set the directory."""

from __future__ import annotations

import pytest

from backends.python.pb_utils.fake_runtime import FakeRuntime
from modelhost.backends.python import pb_utils
from modelhost.backends.python.pb_utils.runtime import (
    installed_runtime,
    require_runtime,
    set_model_dir,
    set_runtime,
)


def test_the_runtime_is_installed_and_removed() -> None:
    assert installed_runtime() is None
    with pytest.raises(pb_utils.TritonModelException, match=r"^BLS is only available when the model runs"):
        require_runtime("BLS")
    fake = FakeRuntime()
    set_runtime(fake)
    try:
        assert installed_runtime() is fake and require_runtime("BLS") is fake
    finally:
        set_runtime(None)
    assert installed_runtime() is None


def test_get_model_dir() -> None:
    with pytest.raises(pb_utils.TritonModelException, match=r"only available when the model runs"):
        pb_utils.get_model_dir()
    set_model_dir("/models/m/1")
    try:
        assert pb_utils.get_model_dir() == "/models/m/1"
    finally:
        set_model_dir(None)
