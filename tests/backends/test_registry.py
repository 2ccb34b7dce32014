"""Which backend serves a model, and what a model of a backend whose framework is missing gets."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig

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
