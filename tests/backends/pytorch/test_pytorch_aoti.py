"""AOTInductor packages (platform torch_aoti): call-spec names, binding, execution, on a stand-in for a loaded
package (compiling a real one takes a C++ compiler and many seconds: the end-to-end module compiles one)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils import _pytree as pytree

from modelhost.backends.pytorch.aoti import AotiInstance, aoti_plan, load_package
from modelhost.backends.pytorch.aoti_probe import probe
from modelhost.backends.pytorch.call_spec import bind_flat, input_names, output_names
from modelhost.backends.pytorch.placement import Placement
from modelhost.backends.pytorch.settings import TorchSettings
from modelhost.errors import BackendInvalidArgument, InternalError, ModelConfigError

from .conftest import ModelFactory, config_text, context, fp32, tensor

CPU = Placement("KIND_CPU", torch.device("cpu"), torch.device("cpu"), False)


def _spec(structure: Any) -> str:
    _, spec = pytree.tree_flatten(structure)
    return str(pytree.treespec_dumps(spec))


class Package:
    """What the backend uses of torch._inductor.aoti_load_package's result."""

    def __init__(
        self, inputs: Any, outputs: Any, run: Callable[[list[torch.Tensor]], list[torch.Tensor]]
    ) -> None:
        self.loader = self
        self._spec = [_spec(inputs), _spec(outputs)]
        self._run = run
        self.device = "cpu"

    def get_call_spec(self) -> list[str]:
        return self._spec

    def run(self, flat: list[torch.Tensor]) -> list[torch.Tensor]:
        return self._run(flat)

    def get_metadata(self) -> dict[str, str]:
        return {"AOTI_DEVICE_KEY": self.device}


def _add_sub(flat: list[torch.Tensor]) -> list[torch.Tensor]:
    return [flat[0] + flat[1], flat[0] - flat[1]]


T = torch.zeros(1)
ADD_SUB_SPEC: tuple[Any, Any] = (((T, T), {}), (T, T))


def test_call_spec_names_as_tritons_readme_lists_them() -> None:
    args = (T, T, {"keyA": T, "key2": T})
    kwargs = {"kwarg1": T, "kw_arg2": T}
    assert input_names(_spec((args, kwargs))) == [
        "ARGS[0]",
        "ARGS[1]",
        "ARGS[2][keyA]",
        "ARGS[2][key2]",
        "KWARGS[kwarg1]",
        "KWARGS[kw_arg2]",
    ]
    result = {"AAA": T, "ZZZ": T, "BBB": (T, T), "CCC": {"keyA": T, "key2": T}}
    assert output_names(_spec(result)) == [
        "RESULT[AAA]",
        "RESULT[ZZZ]",
        "RESULT[BBB][0]",
        "RESULT[BBB][1]",
        "RESULT[CCC][keyA]",
        "RESULT[CCC][key2]",
    ]
    assert output_names(_spec(T)) == ["RESULT"]


def test_binding_by_call_spec_by_ordinal_and_in_order(caplog: pytest.LogCaptureFixture) -> None:
    spec = ["ARGS[0]", "ARGS[1]"]
    assert bind_flat("m", "input", ["ARGS[1]", "ARGS[0]"], spec) == {"ARGS[1]": 1, "ARGS[0]": 0}
    assert bind_flat("m", "input", ["INPUT__1", "INPUT__0"], spec) == {"INPUT__1": 1, "INPUT__0": 0}
    with caplog.at_level(logging.WARNING):
        assert bind_flat("m", "input", ["b", "a"], spec) == {"b": 0, "a": 1}
    assert "bound in configuration order" in caplog.text
    with pytest.raises(ModelConfigError, match=r"output 'OUTPUT__2' refers to output 2, but the model has 2"):
        bind_flat("m", "output", ["OUTPUT__2"], ["RESULT[0]", "RESULT[1]"])


def _model(make_model: ModelFactory, inputs: str, outputs: str, extra: str = "", batch: int = 4) -> Path:
    return make_model(
        "aoti", None, config_text(inputs, outputs, max_batch_size=batch, extra=extra, platform="torch_aoti")
    )


def _instance(model_dir: Path, package: Package, placement: Placement = CPU) -> AotiInstance:
    plan = aoti_plan(context(model_dir), package, TorchSettings(), placement, budget=1)
    return AotiInstance("aoti_0", package, plan, None)


def test_execution_by_call_spec_names(make_model: ModelFactory) -> None:
    model_dir = _model(
        make_model,
        f"{tensor('ARGS[1]')}, {tensor('ARGS[0]')}",
        f"{tensor('RESULT[1]')}, {tensor('RESULT[0]')}",
    )
    instance = _instance(model_dir, Package(*ADD_SUB_SPEC, _add_sub))
    x, y = fp32([5, 5, 5, 5]), fp32([1, 2, 3, 4])
    out = instance.execute({"ARGS[0]": x, "ARGS[1]": y}, ["RESULT[0]", "RESULT[1]"])
    np.testing.assert_array_equal(out["RESULT[0]"], x + y)
    np.testing.assert_array_equal(out["RESULT[1]"], x - y)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("input_handles[0]: unmatched dtype, expected: 6(at::kFloat), but got: 7", BackendInvalidArgument),
        (
            "input_handles[0]: dim value is too large at 0, expected to be <= 8, but got: 9",
            BackendInvalidArgument,
        ),
        ("CUDA error: an illegal memory access was encountered", InternalError),
    ],
)
def test_what_the_compiled_model_refuses(
    make_model: ModelFactory, message: str, expected: type[Exception]
) -> None:
    def refuse(flat: list[torch.Tensor]) -> list[torch.Tensor]:
        raise RuntimeError(message)

    model_dir = _model(make_model, f"{tensor('INPUT__0')}, {tensor('INPUT__1')}", tensor("OUTPUT__0"))
    instance = _instance(model_dir, Package(*ADD_SUB_SPEC, refuse))
    with pytest.raises(expected, match=re.escape(message)):
        instance.execute({"INPUT__0": fp32([1, 2, 3, 4]), "INPUT__1": fp32([1, 2, 3, 4])}, ["OUTPUT__0"])


def test_output_checks(make_model: ModelFactory) -> None:
    model_dir = _model(
        make_model, f"{tensor('INPUT__0')}, {tensor('INPUT__1')}", tensor("OUTPUT__0", "TYPE_INT32")
    )
    instance = _instance(model_dir, Package(*ADD_SUB_SPEC, _add_sub))
    with pytest.raises(
        BackendInvalidArgument, match="configuration expects datatype TYPE_INT32 for output 'OUTPUT__0'"
    ):
        instance.execute({"INPUT__0": fp32([1, 2, 3, 4]), "INPUT__1": fp32([1, 2, 3, 4])}, ["OUTPUT__0"])


@pytest.mark.parametrize(
    ("inputs", "outputs", "extra", "message"),
    [
        (
            tensor("INPUT__0"),
            tensor("OUTPUT__0"),
            "",
            "configuration expects 1 inputs, model provides 2 (ARGS[0], ARGS[1])",
        ),
        (
            f"{tensor('INPUT__0')}, {tensor('INPUT__1')}",
            tensor("OUTPUT__3"),
            "",
            "output 'OUTPUT__3' refers to output 3, but the model has 2 output(s) (RESULT[0], RESULT[1])",
        ),
        (
            f"{tensor('INPUT__0')}, {tensor('INPUT__1', 'TYPE_STRING', '[ 1 ]', 'reshape: { shape: [ ] }')}",
            tensor("OUTPUT__0"),
            "",
            "'INPUT__1' is TYPE_STRING, and an AOTInductor model takes and returns tensors only",
        ),
        (
            f"{tensor('INPUT__0')}, {tensor('INPUT__1')}",
            tensor("OUTPUT__0"),
            "sequence_batching { }",
            "sequence batching is not supported for torch_aoti models",
        ),
    ],
    ids=["count", "output", "strings", "sequence"],
)
def test_configs_the_package_contradicts(
    make_model: ModelFactory, inputs: str, outputs: str, extra: str, message: str
) -> None:
    model_dir = _model(make_model, inputs, outputs, extra)
    with pytest.raises(ModelConfigError) as caught:
        _instance(model_dir, Package(*ADD_SUB_SPEC, _add_sub))
    assert message in str(caught.value)


def test_the_instance_kind_must_match_the_compiled_device(make_model: ModelFactory) -> None:
    model_dir = _model(make_model, f"{tensor('INPUT__0')}, {tensor('INPUT__1')}", tensor("OUTPUT__0"))
    gpu = Placement("KIND_GPU", torch.device("cuda", 0), torch.device("cuda", 0), True)
    with pytest.raises(
        ModelConfigError, match=r"model\.pt2 was compiled for the CPU, and instance group kind KIND_GPU"
    ):
        _instance(model_dir, Package(*ADD_SUB_SPEC, _add_sub), gpu)
    package = Package(*ADD_SUB_SPEC, _add_sub)
    package.device = "cuda"
    with pytest.raises(
        ModelConfigError, match=r"model\.pt2 was compiled for 'cuda', and instance group kind KIND_CPU"
    ):
        _instance(model_dir, package)


def test_a_corrupt_package(tmp_path: Path) -> None:
    path = tmp_path / "model.pt2"
    path.write_bytes(b"not a package")
    with pytest.raises(
        ModelConfigError, match="unable to load model 'm' version 1: failed to load AOTInductor package"
    ):
        load_package("m", 1, path, -1)


def _refusing(message: str, calls: list[list[torch.Tensor]]) -> Package:
    def run(flat: list[torch.Tensor]) -> list[torch.Tensor]:
        calls.append(flat)
        raise RuntimeError(message)

    return Package(*ADD_SUB_SPEC, run)


@pytest.mark.parametrize(
    ("message", "refusal"),
    [
        (
            "input_handles[1]: unmatched dtype, expected: 7(at::kDouble), but got: 6",
            "configuration expects datatype TYPE_FP32 for input 'y', model expects TYPE_FP64",
        ),
        (
            "input_handles[0]: unmatched dim value at 2, expected: 5, but got: 3",
            "input 'x': the model expects size 5 for dimension 2 (batch dimension included), the configuration "
            "gives 3",
        ),
        # The size 1 the probe chose for a variable dimension, or for the batch: nothing known about the config.
        ("input_handles[0]: unmatched dim value at 1, expected: 4, but got: 1", None),
        ("input_handles[0]: dim value is too small at 0, expected it to be >= 2, but got: 1", None),
        ("expected ndim 2 but got 3", None),
    ],
    ids=["dtype", "fixed-dim", "variable-dim", "batch", "other"],
)
def test_the_load_probe(
    make_model: ModelFactory, monkeypatch: pytest.MonkeyPatch, message: str, refusal: str | None
) -> None:
    monkeypatch.setenv("AOTI_RUNTIME_CHECK_INPUTS", "1")
    model_dir = _model(
        make_model, f"{tensor('x', dims='[ -1, 3 ]')}, {tensor('y', dims='[ -1, 3 ]')}", tensor("OUTPUT__0")
    )
    config = context(model_dir).config
    calls: list[list[torch.Tensor]] = []
    package = _refusing(message, calls)
    if refusal is None:
        probe("aoti", config, package, {"x": 0, "y": 1}, torch.device("cpu"))
    else:
        with pytest.raises(ModelConfigError) as caught:
            probe("aoti", config, package, {"x": 0, "y": 1}, torch.device("cpu"))
        assert refusal in str(caught.value)
    # Zeros of the config's shapes and types, variable dimensions and the batch as 1.
    assert [(list(t.shape), t.dtype) for t in calls[0]] == [([1, 1, 3], torch.float32)] * 2


def test_no_probe_without_the_packages_own_checks(
    make_model: ModelFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AOTI_RUNTIME_CHECK_INPUTS", "0")
    model_dir = _model(make_model, f"{tensor('x')}, {tensor('y')}", tensor("OUTPUT__0"))
    calls: list[list[torch.Tensor]] = []
    probe("aoti", context(model_dir).config, _refusing("never", calls), {"x": 0, "y": 1}, torch.device("cpu"))
    assert calls == []
