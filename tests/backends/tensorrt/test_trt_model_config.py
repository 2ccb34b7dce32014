"""A tensorrt_plan model through modelhost's config pipeline: on this host (no tensorrt package) it is refused with
the pip command; with a fake runtime behind the auto-complete hook, the completed config is what Triton makes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import trt_fakes
from trt_fakes import FakeRuntime, batch_engine, gpu_config, write_plan

from modelhost.backends import registry
from modelhost.backends.model_config import load_model_config
from modelhost.backends.tensorrt.loader import autocomplete_plan
from modelhost.errors import ModelConfigError

PIP = "install it with: pip install 'modelhost[tensorrt]'"


def _model(tmp_path: Path, config_text: str | None = None) -> Path:
    model_dir = tmp_path / "trt"
    write_plan(model_dir)
    if config_text is not None:
        (model_dir / "config.pbtxt").write_text(config_text)
    return model_dir


def test_without_the_tensorrt_package_the_model_is_refused_with_the_pip_command(tmp_path: Path) -> None:
    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("the tensorrt package is installed here")
    model_dir = _model(
        tmp_path,
        'platform: "tensorrt_plan" max_batch_size: 8 '
        'input { name: "x" data_type: TYPE_FP32 dims: [3] } '
        'output { name: "y" data_type: TYPE_FP32 dims: [2] }',
    )
    # With auto-complete the hook is the first to need the backend...
    with pytest.raises(registry.MissingExtra) as e:
        load_model_config(model_dir, gpu_count=1)
    assert "the tensorrt backend needs the Python package 'tensorrt'" in str(e.value)
    assert PIP in str(e.value)
    # ...without it, choosing the backend for the load is.
    config = load_model_config(model_dir, auto_complete=False, gpu_count=1)
    assert (config.platform, config.backend, config.default_model_filename) == (
        "tensorrt_plan",
        "tensorrt",
        "model.plan",
    )
    with pytest.raises(registry.MissingExtra, match=r"pip install 'modelhost\[tensorrt\]'"):
        registry.backend_for(config)


def test_a_plan_alone_is_recognised_as_a_tensorrt_model(tmp_path: Path) -> None:
    config = load_model_config(_model(tmp_path, ""), auto_complete=False, gpu_count=1)
    assert (config.platform, config.backend) == ("tensorrt_plan", "tensorrt")


@pytest.fixture
def fake_backend(monkeypatch: pytest.MonkeyPatch) -> FakeRuntime:
    """The registry's tensorrt entry pointing at the real auto-complete code over a fake runtime."""
    runtime = FakeRuntime()
    monkeypatch.setattr(trt_fakes, "FAKE_RUNTIME", runtime)
    monkeypatch.setitem(
        registry._BACKENDS, "tensorrt", registry.BackendEntry("trt_fakes:FakeTensorRTBackend")
    )
    return runtime


def test_no_config_on_a_gpu_host_is_completed_from_the_engine(
    tmp_path: Path, fake_backend: FakeRuntime
) -> None:
    fake_backend.engines[b"plan"] = batch_engine(max_batch=8)
    config = load_model_config(_model(tmp_path), gpu_count=1)
    assert config.max_batch_size == 8
    assert [(i.name, list(i.dims)) for i in config.input] == [("x", [3])]
    assert [(o.name, list(o.dims)) for o in config.output] == [("y", [2])]
    assert list(config.dynamic_batching.preferred_batch_size) == [8]
    group = config.instance_group[0]
    assert (group.kind, list(group.gpus), group.count) == (group.KIND_GPU, [0], 1)
    assert fake_backend.deserialized == [(b"plan", 0, False)]


def test_on_a_cpu_only_host_auto_complete_is_skipped_as_in_triton(
    tmp_path: Path, fake_backend: FakeRuntime
) -> None:
    config = load_model_config(_model(tmp_path), gpu_count=0)
    assert config.instance_group[0].kind == config.instance_group[0].KIND_CPU
    assert not config.input and fake_backend.deserialized == []  # the load then says why it cannot run


def test_a_plan_of_another_tensorrt_version_fails_auto_complete_clearly(
    tmp_path: Path, fake_backend: FakeRuntime
) -> None:
    fake_backend.errors = [
        "IRuntime::deserializeCudaEngine: Error Code 6: API Usage Error (The engine plan file is not compatible "
        "with this version of TensorRT, expecting library version 10.3.0.26 got 10.0.1.6, please rebuild.)"
    ]
    with pytest.raises(ModelConfigError) as e:
        load_model_config(_model(tmp_path), gpu_count=1)
    message = str(e.value)
    assert "was built by another TensorRT version" in message
    assert "modelhost convert onnx-to-tensorrt" in message
    assert "version-compatible=true" in message


def test_auto_complete_reads_the_highest_version_and_the_gpus_cc_file(tmp_path: Path) -> None:
    model_dir = tmp_path / "trt"
    write_plan(model_dir, 1, data=b"old")
    write_plan(model_dir, 3, data=b"new")
    write_plan(model_dir, 3, "model_86.plan", data=b"sm86")
    runtime = FakeRuntime(engines={b"new": batch_engine(4), b"sm86": batch_engine(16)})
    config = gpu_config()
    autocomplete_plan(config, model_dir, runtime)
    assert config.max_batch_size == 4 and runtime.deserialized[-1][0] == b"new"

    config = gpu_config('cc_model_filenames { key: "8.6" value: "model_86.plan" }')
    autocomplete_plan(config, model_dir, runtime)
    assert config.max_batch_size == 16 and runtime.deserialized[-1][0] == b"sm86"


def test_auto_complete_uses_the_first_gpu_of_the_first_group(tmp_path: Path) -> None:
    runtime = FakeRuntime(engines={b"plan": batch_engine()}, devices=2)
    config = gpu_config()
    config.instance_group[0].gpus[:] = [1]
    autocomplete_plan(config, _model(tmp_path), runtime)
    assert runtime.deserialized == [(b"plan", 1, False)]


def test_auto_complete_without_a_plan_names_the_file(tmp_path: Path) -> None:
    model_dir = tmp_path / "trt"
    (model_dir / "1").mkdir(parents=True)
    with pytest.raises(ModelConfigError) as e:
        autocomplete_plan(gpu_config(), model_dir, FakeRuntime())
    assert (
        str(e.value)
        == f"unable to autofill for 'trt': no version directory of {model_dir} contains 'model.plan'"
    )
