"""Binding config inputs and outputs to forward()'s arguments and results: Triton's three naming conventions, and
what a load refuses."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from modelhost.backends.pytorch.naming import Convention, bind_inputs, bind_outputs, named_index
from modelhost.backends.pytorch.signature import Argument, Returns, Signature
from modelhost.config import parse_config_text
from modelhost.errors import ModelConfigError

from .conftest import config_text, tensor

TENSORS = Returns("tuple", "Tuple[Tensor, Tensor]", ("tensor", "tensor"))


def _config(inputs: str, outputs: str = tensor("OUTPUT__0"), extra: str = "", max_batch_size: int = 0) -> Any:
    return parse_config_text(
        config_text(inputs, outputs, extra=extra, max_batch_size=max_batch_size), "m", "test"
    )


def _signature(*arguments: tuple[str, str], returns: Returns = TENSORS) -> Signature:
    types = {"tensor": "Tensor", "strings": "List[str]", "tensor_dict": "Dict[str, Tensor]", "other": "int"}
    return Signature(tuple(Argument(n, k, types[k]) for n, k in arguments), returns)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "index"),
    [
        ("INPUT__0", 0),
        ("x__12", 12),
        ("a__b__1", None),
        ("INPUT_0", None),
        ("INPUT__", None),
        ("in__1x", None),
    ],
)
def test_named_index(name: str, index: int | None) -> None:
    assert named_index(name) == index


def test_forward_argument_names_bind_by_name_in_any_order() -> None:
    binding = bind_inputs(
        "m", _config(f"{tensor('y')}, {tensor('x')}"), _signature(("x", "tensor"), ("y", "tensor"))
    )
    assert binding.convention == Convention.FORWARD_ARGUMENT
    assert binding.positions == {"x": 0, "y": 1}
    assert binding.arity == 2


def test_named_index_binds_by_the_number() -> None:
    config = _config(f"{tensor('INPUT__1')}, {tensor('INPUT__0')}")
    binding = bind_inputs("m", config, _signature(("a", "tensor"), ("b", "tensor")))
    assert binding.convention == Convention.NAMED_INDEX
    assert binding.positions == {"INPUT__1": 1, "INPUT__0": 0}


def test_other_names_bind_in_config_order_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    config = _config(f"{tensor('beta')}, {tensor('alpha')}")
    with caplog.at_level(logging.WARNING):
        binding = bind_inputs("m", config, _signature(("a", "tensor"), ("b", "tensor")))
    assert binding.convention == Convention.STRICT_CONFIG_ORDERING
    assert binding.positions == {"beta": 0, "alpha": 1}
    assert "input 'beta' or previous input(s) are neither an input argument to the model 'm'" in caplog.text


def test_a_single_dict_argument_takes_every_input_by_name() -> None:
    config = _config(f"{tensor('a')}, {tensor('b')}, {tensor('c')}")
    binding = bind_inputs("m", config, _signature(("inputs", "tensor_dict")))
    assert binding.dict_input
    assert binding.positions == {}


@pytest.mark.parametrize(
    ("arguments", "inputs", "message"),
    [
        (
            (("x", "tensor"),),
            f"{tensor('x')}, {tensor('y')}",
            "unable to load model 'm', configuration expects 2 inputs, model provides 1 (forward(x: Tensor))",
        ),
        (
            (("x", "tensor"), ("y", "tensor")),
            f"{tensor('INPUT__0')}, {tensor('INPUT__2')}",
            "input 'INPUT__2' refers to forward() argument 2, but forward() takes 2 argument(s)",
        ),
        (
            (("x", "tensor"), ("y", "tensor")),
            f"{tensor('A__0')}, {tensor('B__0')}",
            "inputs 'A__0' and 'B__0' both refer to forward() argument 0",
        ),
        (
            (("x", "tensor"), ("n", "other")),
            f"{tensor('x')}, {tensor('n')}",
            "an input of type 'int' (forward() argument 'n') was detected in the model",
        ),
        (
            (("d", "tensor_dict"), ("x", "tensor")),
            f"{tensor('d')}, {tensor('x')}",
            "only a single input of type Dict(str, Tensor) is supported",
        ),
        (
            (("words", "tensor"),),
            tensor("words", "TYPE_STRING", "[ -1 ]"),
            "input 'words' is TYPE_STRING, which a TorchScript model takes as List[str], but forward() argument "
            "'words' is Tensor",
        ),
        (
            (("words", "strings"),),
            tensor("words", "TYPE_INT32", "[ -1 ]"),
            "input 'words' is a tensor, but forward() argument 'words' is List[str]: declare the input TYPE_STRING",
        ),
        (
            (("d", "tensor_dict"),),
            tensor("words", "TYPE_STRING", "[ -1 ]"),
            "input 'words' is TYPE_STRING, but forward() takes Dict[str, Tensor]",
        ),
    ],
    ids=[
        "count",
        "index",
        "twice",
        "type",
        "dict-and-more",
        "string-to-tensor",
        "tensor-to-strings",
        "dict-strings",
    ],
)
def test_inputs_that_contradict_forward_are_refused(
    arguments: tuple[tuple[str, str], ...], inputs: str, message: str
) -> None:
    with pytest.raises(ModelConfigError) as caught:
        bind_inputs("m", _config(inputs), _signature(*arguments))
    assert message in str(caught.value)


SEQUENCE = """
sequence_batching {
  control_input [
    { name: "START__2" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "ready" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
  %s
}
"""
STATE = 'state [ { input_name: "STATE__3" output_name: "STATE_OUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]'


def test_sequence_controls_and_state_take_their_positions() -> None:
    config = _config(f"{tensor('INPUT__0')}", extra=SEQUENCE % STATE)
    arguments = (("x", "tensor"), ("ready", "tensor"), ("start", "tensor"), ("state", "tensor"))
    binding = bind_inputs("m", config, _signature(*arguments))
    assert binding.positions == {"INPUT__0": 0, "START__2": 2, "ready": 1, "STATE__3": 3}
    outputs = bind_outputs("m", config, TENSORS)
    assert outputs.indices == {"OUTPUT__0": 0, "STATE_OUT__1": 1}


def test_state_needs_named_index_inputs() -> None:
    config = _config(f"{tensor('x')}", extra=SEQUENCE % STATE)
    arguments = (("x", "tensor"), ("ready", "tensor"), ("start", "tensor"), ("state", "tensor"))
    with pytest.raises(ModelConfigError, match="is using sequence batching with state but not all inputs"):
        bind_inputs("m", config, _signature(*arguments))


def test_a_control_needs_a_usable_name() -> None:
    config = _config(f"{tensor('x')}", extra=SEQUENCE % "")
    arguments = (("x", "tensor"), ("start", "tensor"), ("other", "tensor"))
    with pytest.raises(
        ModelConfigError, match="input 'ready' does not follow <name>__<index> naming convention"
    ):
        bind_inputs("m", config, _signature(*arguments))


def test_batch_inputs_follow_the_inputs_convention() -> None:
    extra = 'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "count" data_type: TYPE_FP32 source_input: "x" } ]'
    config = _config(
        tensor("x", dims="[ -1 ]", more="allow_ragged_batch: true"), extra=extra, max_batch_size=4
    )
    binding = bind_inputs("m", config, _signature(("count", "tensor"), ("x", "tensor")))
    assert binding.positions == {"x": 1, "count": 0}


def test_outputs_by_named_index_may_be_a_subset() -> None:
    binding = bind_outputs("m", _config(tensor("x"), tensor("OUTPUT__1")), TENSORS)
    assert binding.convention == Convention.NAMED_INDEX
    assert binding.indices == {"OUTPUT__1": 1}


def test_outputs_in_config_order(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        binding = bind_outputs("m", _config(tensor("x"), f"{tensor('diff')}"), TENSORS)
    assert binding.convention == Convention.STRICT_CONFIG_ORDERING
    assert binding.indices == {"diff": 0}
    assert (
        "output 'diff' or previous output(s) of the model 'm' do not follow the <name>__<index>"
        in caplog.text
    )
    assert "the configuration lists 1 output(s) and forward() returns 2" in caplog.text


def test_dict_results_bind_by_key() -> None:
    binding = bind_outputs(
        "m", _config(tensor("x"), tensor("sum")), Returns("tensor_dict", "Dict[str, Tensor]")
    )
    assert binding.by_key
    assert not binding.indices


@pytest.mark.parametrize(
    ("outputs", "returns", "message"),
    [
        (
            tensor("OUTPUT__2"),
            TENSORS,
            "output 'OUTPUT__2' refers to output index 2, but forward() returns 2 output(s)",
        ),
        (
            tensor("OUTPUT__1"),
            Returns("tensor", "Tensor"),
            "refers to output index 1, but forward() returns 1 output(s)",
        ),
        (
            tensor("OUTPUT__0", "TYPE_STRING", "[ -1 ]"),
            Returns("tensor", "Tensor"),
            "output 'OUTPUT__0' is TYPE_STRING, but forward() returns a tensor there",
        ),
        (
            tensor("OUTPUT__0"),
            Returns("strings", "List[str]"),
            "output 'OUTPUT__0' is TYPE_FP32, but forward() returns a List[str] there",
        ),
        (
            tensor("OUTPUT__1"),
            Returns("tuple", "Tuple[Tensor, int]", ("tensor", "other")),
            "whose element 1 is neither a Tensor nor a List[str]",
        ),
        (
            tensor("OUTPUT__0", "TYPE_STRING", "[ -1 ]"),
            Returns("tensor_dict", "Dict[str, Tensor]"),
            "output 'OUTPUT__0' is TYPE_STRING, but forward() returns Dict[str, Tensor]",
        ),
        ("", TENSORS, "model configuration must contain at least one output"),
    ],
    ids=["index", "single", "string-tensor", "tensor-strings", "other", "dict-strings", "none"],
)
def test_outputs_that_contradict_forward_are_refused(outputs: str, returns: Returns, message: str) -> None:
    with pytest.raises(ModelConfigError) as caught:
        bind_outputs("m", _config(tensor("x"), outputs), returns)
    assert message in str(caught.value)


def test_unknown_result_types_are_checked_when_they_run() -> None:
    # A List[Tensor] (or Any) result: its length is known only once forward() runs (results.py checks it then).
    binding = bind_outputs(
        "m", _config(tensor("x"), tensor("OUTPUT__5")), Returns("tensor_list", "List[Tensor]")
    )
    assert binding.indices == {"OUTPUT__5": 5}
