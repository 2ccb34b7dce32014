"""The input and output names of an AOTInductor package, from its call specification.

An AOTInductor model runs on flat lists of tensors; its call spec (two serialized pytree specs) says how forward()'s
arguments and result flatten into them. Triton (26.05+) names each flat position by its path in that structure:
inputs `ARGS[0]`, `ARGS[2][key]`, `KWARGS[name]`; outputs `RESULT` (a single tensor), `RESULT[0]`, `RESULT[key][1]`.
The ordinal names `INPUT__<i>` / `OUTPUT__<i>` address the same flat positions.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from torch.utils import _pytree as pytree

from modelhost.backends.pytorch.naming import named_index
from modelhost.errors import ModelConfigError

log = logging.getLogger(__name__)


def _key(entry: Any) -> str:
    """One step of a pytree path: a tuple or list index, a dict key, a named field."""
    for attribute in ("idx", "key", "name"):
        if hasattr(entry, attribute):
            return f"[{getattr(entry, attribute)}]"
    return f"[{entry}]"


def _paths(spec: str) -> list[tuple[Any, ...]]:
    """The path of every leaf of a serialized pytree spec, in flat order."""
    tree_spec = pytree.treespec_loads(spec)
    tree = pytree.tree_unflatten(list(range(tree_spec.num_leaves)), tree_spec)
    leaves, _ = pytree.tree_flatten_with_path(tree)
    return [tuple(path) for path, _ in leaves]


def input_names(in_spec: str) -> list[str]:
    """Call-spec names of the flat inputs: the spec is (args tuple, kwargs dict)."""
    names = []
    for path in _paths(in_spec):
        if not path:
            names.append("ARGS")
            continue
        head = "KWARGS" if getattr(path[0], "idx", 0) == 1 else "ARGS"
        names.append(head + "".join(_key(entry) for entry in path[1:]))
    return names


def output_names(out_spec: str) -> list[str]:
    """Call-spec names of the flat outputs: `RESULT` for a lone tensor, else its path under RESULT."""
    return ["RESULT" + "".join(_key(entry) for entry in path) for path in _paths(out_spec)]


def bind_flat(
    model: str, kind: str, names: Sequence[str], spec_names: Sequence[str], *, warn: bool = True
) -> dict[str, int]:
    """Config tensor name -> flat position: by call-spec name when every name is one, else by `<name>__<index>`
    when every name is one, else in config order (with a warning), as Triton binds them. `kind`: "input" or
    "output"; every position must exist."""
    if all(n in spec_names for n in names):
        positions = {n: spec_names.index(n) for n in names}
    elif all(named_index(n) is not None for n in names):
        positions = {n: named_index(n) or 0 for n in names}
    else:
        (log.warning if warn else log.debug)(
            "model '%s': %s names %s are neither all call-spec names (%s) nor all <name>__<index>: bound in "
            "configuration order",
            model,
            kind,
            list(names),
            ", ".join(spec_names),
        )
        positions = {n: i for i, n in enumerate(names)}
    for name, position in positions.items():
        if position >= len(spec_names):
            raise ModelConfigError(
                f"unable to load model '{model}': {kind} '{name}' refers to {kind} {position}, but the model has "
                f"{len(spec_names)} {kind}(s) ({', '.join(spec_names)})"
            )
    return positions


__all__ = ["bind_flat", "input_names", "output_names"]
