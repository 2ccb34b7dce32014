"""The backend's entry points: auto-complete, instance kinds, platforms, the config fill."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from modelhost.backends.model_config import load_model_config
from modelhost.backends.registry import backend_for
from modelhost.errors import ModelConfigError

from .conftest import Loader, ModelFactory, config_text, context, fp32, tensor
from .torch_test_models import AddSub, script

ADD_SUB = config_text(
    f"{tensor('x')}, {tensor('y')}", f"{tensor('OUTPUT__0')}, {tensor('OUTPUT__1')}", max_batch_size=4
)


def test_the_registry_serves_pytorch_models_with_this_backend(make_model: ModelFactory) -> None:
    config = load_model_config(make_model("add_sub", script(AddSub()), ADD_SUB), auto_complete=False)
    assert type(backend_for(config)).__name__ == "PyTorchBackend"


def test_auto_complete_only_warns_as_triton_does(
    make_model: ModelFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # A config naming the backend and nothing else stays as it is: no dims or dtypes can be read from the model.
    model_dir = make_model("bare", script(AddSub()), ADD_SUB)
    with caplog.at_level(logging.WARNING):
        config = load_model_config(model_dir)
    assert (
        "skipping model configuration auto-complete for 'bare': not supported for pytorch backend"
        in caplog.text
    )
    assert [t.name for t in config.input] == ["x", "y"]
    assert config.platform == "pytorch_libtorch"
    assert config.default_model_filename == "model.pt"


def test_a_model_pt_alone_is_refused_at_load(make_model: ModelFactory, load_instance: Loader) -> None:
    # Without config.pbtxt the file decides the platform, and nothing fills in inputs and outputs.
    model_dir = make_model("no_config", script(AddSub()), "")
    (model_dir / "config.pbtxt").unlink()
    config = load_model_config(model_dir)
    assert (config.backend, config.platform, len(config.input)) == ("pytorch", "pytorch_libtorch", 0)
    # Triton's libtorch backend counts forward()'s arguments before it asks for at least one input.
    with pytest.raises(ModelConfigError, match="configuration expects 0 inputs, model provides 2"):
        load_instance(model_dir, ctx=context(model_dir, auto_complete=True))


def test_kind_gpu_without_cuda_in_torch(make_model: ModelFactory, load_instance: Loader) -> None:
    # The server sees a GPU (so the config is valid) but this torch has no CUDA.
    config = ADD_SUB.replace("KIND_CPU", "KIND_GPU")
    model_dir = make_model("on_gpu", script(AddSub()), config)
    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    with pytest.raises(ModelConfigError) as caught:
        load_instance(model_dir, ctx=context(model_dir, gpu_count=1))
    assert str(caught.value) == (
        f"unable to load model 'on_gpu': instance group kind KIND_GPU needs PyTorch with CUDA and a visible GPU, "
        f"and this torch ({torch.__version__}) has none (torch.cuda.is_available() is False); use KIND_CPU, or "
        "install a CUDA build of torch"
    )


def test_kind_model_keeps_the_models_placement(make_model: ModelFactory, load_instance: Loader) -> None:
    instance = load_instance(
        make_model("placed", script(AddSub()), ADD_SUB.replace("KIND_CPU", "KIND_MODEL"))
    )
    assert instance.plan.placement.kind == "KIND_MODEL"
    assert instance.plan.placement.map_location is None
    x = fp32([1, 2, 3, 4])
    np.testing.assert_array_equal(instance.execute({"x": x, "y": x}, ["OUTPUT__0"])["OUTPUT__0"], x * 2)


def test_the_python_runtime_of_pytorch_2_is_refused(make_model: ModelFactory, load_instance: Loader) -> None:
    model_dir = make_model("runtime", script(AddSub()), ADD_SUB + 'runtime: "model.py"')
    with pytest.raises(
        ModelConfigError, match=r"the PyTorch 2 python runtime \(runtime: \"model.py\"\) is not"
    ):
        load_instance(model_dir)


def test_count_mismatch_names_the_forward_arguments(make_model: ModelFactory, load_instance: Loader) -> None:
    config = config_text(tensor("x"), tensor("OUTPUT__0"), max_batch_size=4)
    with pytest.raises(ModelConfigError) as caught:
        load_instance(make_model("short", script(AddSub()), config))
    assert str(caught.value) == (
        "unable to load model 'short', configuration expects 1 inputs, model provides 2 (forward(x: Tensor, "
        "y: Tensor))"
    )
