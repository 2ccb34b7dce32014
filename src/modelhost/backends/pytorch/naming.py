"""Which forward() argument a config input feeds, and which returned value a config output is.

TorchScript arguments are positional and outputs unnamed, so Triton's PyTorch backend binds config names by one of
three conventions (src/pt/model_instance_state.cc, GetNamingConvention), decided over all of the config's inputs
(and separately over its outputs):

- FORWARD_ARGUMENT: every config input is named after a forward() argument (`self` skipped);
- NAMED_INDEX: every name is `<anything>__<int>` (`INPUT__0`), the int being the position;
- STRICT_CONFIG_ORDERING otherwise: the config's order is forward()'s order (a warning says so).

Outputs are NAMED_INDEX or in config order. A forward() taking one Dict[str, Tensor] gets every input keyed by its
config name; a forward() returning Dict[str, Tensor] answers each output by its config name (Triton refuses dict
results; see docs/backends/pytorch.md). Inputs the server feeds (batch inputs, sequence controls, implicit state)
take forward() positions too, and Triton's rules for them: sequence controls and state by `<name>__<index>`.

Everything that contradicts forward()'s schema is refused here, at load, with the tensor named.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tritonclient.grpc.model_config_pb2 import DataType

from modelhost.backends.pytorch.signature import Argument, Returns, Signature
from modelhost.errors import ModelConfigError

log = logging.getLogger(__name__)

STRING = "TYPE_STRING"


class Convention(StrEnum):
    FORWARD_ARGUMENT = "FORWARD_ARGUMENT"
    NAMED_INDEX = "NAMED_INDEX"
    STRICT_CONFIG_ORDERING = "STRICT_CONFIG_ORDERING"


def named_index(name: str) -> int | None:
    """The index of a `<anything>__<int>` name (after its first "__", as Triton reads it), else None."""
    _, sep, tail = name.partition("__")
    if not sep or not tail.isascii() or not tail.isdigit():
        return None
    return int(tail)


@dataclass(frozen=True, slots=True)
class InputBinding:
    # tensor name -> forward() argument position (empty when forward() takes one dict of tensors)
    positions: dict[str, int]
    arity: int
    dict_input: bool = False
    convention: Convention | None = None


@dataclass(frozen=True, slots=True)
class OutputBinding:
    # output name -> index into the returned tuple or list (empty when forward() returns a dict)
    indices: dict[str, int] = field(default_factory=dict)
    by_key: bool = False
    convention: Convention | None = None
    # forward() returns one value (a Tensor or a List[str]), not a tuple or list of them
    single: bool = False


def _fail(model: str, why: str) -> ModelConfigError:
    return ModelConfigError(f"unable to load model '{model}': {why}")


def _state_error(model: str, state: str) -> ModelConfigError:
    return ModelConfigError(
        f"PyTorch model '{model}' is using sequence batching with state but state '{state}' does not follow the "
        "<name>__<index> naming convention."
    )


def _states(config: Any) -> list[Any]:
    return list(config.sequence_batching.state) if config.HasField("sequence_batching") else []


def _controls(config: Any) -> list[str]:
    if not config.HasField("sequence_batching"):
        return []
    return [c.name for c in config.sequence_batching.control_input]


def _batch_targets(config: Any) -> list[str]:
    return [name for b in config.batch_input for name in b.target_name]


def input_convention(
    model: str, names: Sequence[str], arguments: Sequence[str], *, warn: bool = True
) -> Convention:
    if all(n in arguments for n in names):
        return Convention.FORWARD_ARGUMENT
    if all(named_index(n) is not None for n in names):
        return Convention.NAMED_INDEX
    first = next(n for n in names if named_index(n) is None)
    (log.warning if warn else log.debug)(
        "input '%s' or previous input(s) are neither an input argument to the model '%s' nor do they follow the "
        "<name>__<index> naming convention. Falling back to enforcing strict ordering from model configuration.",
        first,
        model,
    )
    return Convention.STRICT_CONFIG_ORDERING


def output_convention(model: str, names: Sequence[str], *, warn: bool = True) -> Convention:
    if all(named_index(n) is not None for n in names):
        return Convention.NAMED_INDEX
    first = next(n for n in names if named_index(n) is None)
    (log.warning if warn else log.debug)(
        "output '%s' or previous output(s) of the model '%s' do not follow the <name>__<index> naming convention. "
        "Falling back to enforcing strict ordering from model configuration.",
        first,
        model,
    )
    return Convention.STRICT_CONFIG_ORDERING


def _describe(arguments: Sequence[Argument]) -> str:
    return "forward(" + ", ".join(f"{a.name}: {a.type_name}" for a in arguments) + ")"


def _bind_dict(model: str, config: Any, argument: Argument) -> InputBinding:
    for tensor in config.input:
        if DataType.Name(tensor.data_type) == STRING:
            raise _fail(
                model,
                f"input '{tensor.name}' is TYPE_STRING, but forward() takes {argument.type_name}: strings reach "
                "a TorchScript model only as a List[str] argument",
            )
    return InputBinding({}, 1, dict_input=True)


def _positions(
    model: str, config: Any, arguments: Sequence[Argument], convention: Convention
) -> list[tuple[str, int]]:
    """(tensor name, forward() position) for every tensor the model gets, config inputs first."""
    names = [a.name for a in arguments]
    inputs = [t.name for t in config.input]
    bound: list[tuple[str, int]] = []
    for i, name in enumerate(inputs):
        if convention == Convention.FORWARD_ARGUMENT:
            bound.append((name, names.index(name)))
        elif convention == Convention.NAMED_INDEX:
            bound.append((name, named_index(name) or 0))
        else:
            bound.append((name, i))
    for i, name in enumerate(_batch_targets(config)):
        if convention == Convention.STRICT_CONFIG_ORDERING:
            bound.append((name, len(inputs) + i))
        elif name in names:
            bound.append((name, names.index(name)))
        elif (index := named_index(name)) is not None:
            bound.append((name, index))
        else:
            raise _fail(
                model,
                f"batch input '{name}' is neither a forward() argument nor named <name>__<index> "
                f"({_describe(arguments)})",
            )
    for name in _controls(config):
        if name in names:
            bound.append((name, names.index(name)))
        elif (index := named_index(name)) is not None:
            bound.append((name, index))
        else:
            raise ModelConfigError(f"input '{name}' does not follow <name>__<index> naming convention.")
    for state in _states(config):
        index = named_index(state.input_name)
        if index is None:
            raise _state_error(model, state.input_name)
        bound.append((state.input_name, index))
    return bound


def _check_types(model: str, config: Any, arguments: Sequence[Argument], positions: dict[str, int]) -> None:
    strings = {t.name for t in config.input if DataType.Name(t.data_type) == STRING}
    for name, position in positions.items():
        argument = arguments[position]
        if name in strings and argument.kind != "strings":
            raise _fail(
                model,
                f"input '{name}' is TYPE_STRING, which a TorchScript model takes as List[str], but forward() "
                f"argument '{argument.name}' is {argument.type_name}",
            )
        if name not in strings and argument.kind == "strings":
            raise _fail(
                model,
                f"input '{name}' is a tensor, but forward() argument '{argument.name}' is List[str]: declare the "
                "input TYPE_STRING",
            )


def _count_mismatch(model: str, expected: int, arguments: Sequence[Argument]) -> ModelConfigError:
    return ModelConfigError(
        f"unable to load model '{model}', configuration expects {expected} inputs, model provides "
        f"{len(arguments)} ({_describe(arguments)})"
    )


def bind_inputs(model: str, config: Any, signature: Signature, *, warn: bool = True) -> InputBinding:
    """Where each config input (and each input the server feeds) goes in forward(); ModelConfigError where the
    config contradicts forward()'s schema. `warn`: log the strict-ordering warning (once per load)."""
    arguments = signature.arguments
    expected = len(config.input) + len(_batch_targets(config)) + len(_controls(config)) + len(_states(config))
    if not config.input:
        if expected != len(arguments):  # Triton's backend counts first
            raise _count_mismatch(model, expected, arguments)
        raise _fail(model, "model configuration must contain at least one input, none were specified.")
    dicts = [a for a in arguments if a.kind == "tensor_dict"]
    if len(arguments) == 1 and dicts:
        return _bind_dict(model, config, dicts[0])
    if dicts:
        raise _fail(
            model,
            f"forward() argument '{dicts[0].name}' is {dicts[0].type_name} but forward() takes other arguments "
            f"too: only a single input of type Dict(str, Tensor) is supported ({_describe(arguments)})",
        )
    for argument in arguments:
        if argument.kind == "other":
            raise _fail(
                model,
                f"an input of type '{argument.type_name}' (forward() argument '{argument.name}') was detected in "
                "the model. Only a single input of type Dict(str, Tensor) or input(s) of type Tensor or List[str] "
                "are supported.",
            )
    if expected != len(arguments):
        raise _count_mismatch(model, expected, arguments)
    convention = input_convention(
        model, [t.name for t in config.input], [a.name for a in arguments], warn=warn
    )
    if _states(config) and convention != Convention.NAMED_INDEX:
        raise ModelConfigError(
            f"PyTorch model '{model}' is using sequence batching with state but not all inputs and outputs "
            "follow the <name>__<index> naming convention. "
        )
    positions: dict[str, int] = {}
    owner: dict[int, str] = {}
    for name, position in _positions(model, config, arguments, convention):
        if position >= len(arguments):
            raise _fail(
                model,
                f"input '{name}' refers to forward() argument {position}, but forward() takes "
                f"{len(arguments)} argument(s) ({_describe(arguments)})",
            )
        if position in owner:
            raise _fail(
                model, f"inputs '{owner[position]}' and '{name}' both refer to forward() argument {position}"
            )
        owner[position] = name
        positions[name] = position
    _check_types(model, config, arguments, positions)
    return InputBinding(positions, len(arguments), convention=convention)


def _output_types(config: Any) -> dict[str, str]:
    types = {s.output_name: DataType.Name(s.data_type) for s in _states(config)}
    types.update({t.name: DataType.Name(t.data_type) for t in config.output})
    return types


def _check_output(model: str, name: str, index: int, data_type: str, returns: Returns) -> None:
    count = returns.count
    if count is not None and index >= count:
        raise _fail(
            model,
            f"output '{name}' refers to output index {index}, but forward() returns {count} output(s) "
            f"({returns.type_name})",
        )
    kind = returns.element(index)
    if kind == "other":
        raise _fail(
            model,
            f"output '{name}': forward() returns {returns.type_name}, whose element {index} is neither a Tensor "
            "nor a List[str]",
        )
    if kind == "tensor" and data_type == STRING:
        raise _fail(
            model,
            f"output '{name}' is TYPE_STRING, but forward() returns a tensor there ({returns.type_name}); a "
            "TorchScript model returns strings as List[str]",
        )
    if kind == "strings" and data_type != STRING:
        raise _fail(
            model,
            f"output '{name}' is {data_type}, but forward() returns a List[str] there ({returns.type_name}): "
            "declare the output TYPE_STRING",
        )


def bind_outputs(model: str, config: Any, returns: Returns, *, warn: bool = True) -> OutputBinding:
    """Which returned value each config output (and each implicit state output) is; ModelConfigError where
    forward()'s return type contradicts the config. `warn`: log what is worth a warning (once per load)."""
    names = [t.name for t in config.output]
    if not names:
        raise _fail(model, "model configuration must contain at least one output, none were specified.")
    types = _output_types(config)
    if returns.kind == "tensor_dict":
        for name, data_type in types.items():
            if data_type == STRING:
                raise _fail(
                    model, f"output '{name}' is TYPE_STRING, but forward() returns {returns.type_name}"
                )
        return OutputBinding(by_key=True)
    convention = output_convention(model, names, warn=warn)
    states = _states(config)
    if states and convention != Convention.NAMED_INDEX:
        raise ModelConfigError(
            f"PyTorch model '{model}' is using sequence batching with state but not all inputs and outputs "
            "follow the <name>__<index> naming convention. "
        )
    indices = {
        name: (named_index(name) or 0) if convention == Convention.NAMED_INDEX else i
        for i, name in enumerate(names)
    }
    for state in states:
        index = named_index(state.output_name)
        if index is None:
            raise _state_error(model, state.output_name)
        indices[state.output_name] = index
    for name, index in indices.items():
        _check_output(model, name, index, types[name], returns)
    count = returns.count
    if warn and convention == Convention.STRICT_CONFIG_ORDERING and count is not None and count != len(names):
        log.warning(
            "model '%s': the configuration lists %d output(s) and forward() returns %d (%s); outputs are taken "
            "in configuration order",
            model,
            len(names),
            count,
            returns.type_name,
        )
    return OutputBinding(indices, convention=convention, single=returns.kind in ("tensor", "strings"))


__all__ = [
    "Convention",
    "InputBinding",
    "OutputBinding",
    "bind_inputs",
    "bind_outputs",
    "input_convention",
    "named_index",
    "output_convention",
]
