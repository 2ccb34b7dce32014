"""Which backend serves a model, and what a model of a backend whose framework is missing gets."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from modelhost.backends import registry
from modelhost.errors import ModelConfigError


def test_a_missing_framework_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A backend module whose framework is not installed, as on a host without the extra.
    (tmp_path / "modelhost_fake_backend.py").write_text("import modelhost_fake_framework\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(
        registry._BACKENDS,
        "fake",
        registry.BackendEntry("modelhost_fake_backend:FakeBackend", "fake", ("modelhost_fake_framework",)),
    )
    with pytest.raises(registry.MissingExtra) as e:
        registry.backend_for(ModelConfig(name="m", backend="fake"))
    assert str(e.value) == (
        "unable to load model 'm': the fake backend needs the Python package 'modelhost_fake_framework', which "
        "is not installed; install it with: pip install 'modelhost[fake]'"
    )


def test_an_unknown_backend_lists_the_supported_ones() -> None:
    with pytest.raises(
        ModelConfigError, match=r"backend 'nope' for model 'm' is not supported \(supported: .*fil"
    ):
        registry.backend_for(ModelConfig(name="m", backend="nope"))


def test_every_backend_of_the_table_names_an_importable_module_path() -> None:
    for name, entry in registry._BACKENDS.items():
        module, _, attribute = entry.target.partition(":")
        assert module.startswith(f"modelhost.backends.{name}."), name
        assert attribute, name


@pytest.mark.parametrize(
    ("runtime", "message"),
    [
        (
            "../dummy_runtime/libtriton_identity.so",
            "backend library name '../dummy_runtime/libtriton_identity.so' escapes backend directory",
        ),
        (
            "/opt/lib/libtriton_identity.so",
            "backend library name '/opt/lib/libtriton_identity.so' escapes backend directory",
        ),
        ("__invalid_runtime__", "unable to find backend library '__invalid_runtime__' for model 'm'"),
    ],
)
def test_a_runtime_library_other_than_the_backends_is_refused_in_tritons_words(
    runtime: str, message: str
) -> None:
    with pytest.raises(ModelConfigError) as e:
        registry.backend_for(ModelConfig(name="m", backend="onnxruntime", runtime=runtime))
    assert str(e.value) == message


def test_the_backends_own_library_name_is_accepted_as_runtime() -> None:
    backend = registry.backend_for(
        ModelConfig(name="m", backend="onnxruntime", runtime="libtriton_onnxruntime.so")
    )
    assert backend.name == "onnxruntime"


def test_the_auto_complete_hook_gets_the_backend_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # --backend-config=python,... reaches a python model's auto_complete_config stub, as it reaches its instances.
    seen: list[object] = []
    monkeypatch.setattr(
        "modelhost.backends.python.backend.autocomplete_python",
        lambda config, model_dir, settings=None, model_file=None: seen.append(settings),
    )
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.py").write_text("")
    table = {"": {"stub-timeout-seconds": "5"}, "python": {"shm-region-prefix-name": "mine_"}}
    assert registry.autocomplete(
        ModelConfig(name="m", backend="python"),
        tmp_path / "m",
        default_max_batch_size=4,
        backend_config=table,
    )
    [settings] = seen
    assert (settings.stub_timeout_seconds, settings.shm_region_prefix_name) == (5, "mine_")  # type: ignore[attr-defined]


def test_a_python_based_backend_sees_the_python_settings_under_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "echo").mkdir()
    (tmp_path / "echo" / "model.py").write_text("")
    monkeypatch.setattr(registry, "_backend_directory", tmp_path)
    table = {"": {"a": "global"}, "python": {"a": "python", "b": "python"}, "echo": {"b": "echo"}}
    assert registry.backend_settings(table, "echo") == {"a": "python", "b": "echo"}
    assert registry.backend_settings(table, "onnxruntime") == {"a": "global"}


def test_onnxruntime_runs_on_a_gpu_only_with_its_cuda_provider() -> None:
    import onnxruntime

    has_cuda = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
    assert registry.runs_on_gpu("onnxruntime", "m") is has_cuda
    # Backends without the hook, and names no backend has, are taken to run where they are told.
    assert registry.runs_on_gpu("python", "m") is True
    assert registry.runs_on_gpu("no_such_backend", "m") is True


def test_an_onnx_model_without_instance_groups_runs_on_the_cpu_of_a_gpu_host_without_onnxruntime_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from modelhost.backends.model_config import complete_model_config
    from modelhost.backends.onnxruntime.backend import OnnxRuntimeBackend

    model_dir = tmp_path / "m"
    model_dir.mkdir()
    config = ModelConfig(backend="onnxruntime")
    for gpu_capable, kind in ((False, "KIND_CPU"), (True, "KIND_GPU")):
        monkeypatch.setattr(
            OnnxRuntimeBackend, "gpu_capable", staticmethod(lambda capable=gpu_capable: capable)
        )
        completed = complete_model_config(config, model_dir, source="test", auto_complete=False, gpu_count=1)
        assert [ModelInstanceGroup.Kind.Name(g.kind) for g in completed.instance_group] == [kind]
