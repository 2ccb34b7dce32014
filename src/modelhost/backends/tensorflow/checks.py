"""The config checked against the model at load, as Triton's TF backend checks it (ValidateTRITONTFModel).

SavedModel: every signature input in the config (or fed by the server), names, datatypes and shapes as declared;
outputs compared exactly (a config -1 where the signature fixes the size is refused, as Triton does); a ragged
input must be [-1] in the signature. GraphDef: a GraphDef declares no inputs and outputs, so a config input must
name a Placeholder and an output any node; their types and shapes are checked where the graph states them, and
every output must be computable from the listed inputs (Triton checks names only, and lets every request fail).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from modelhost.backends.model_io import TensorInfo, check_dims, check_io, fed_by_server
from modelhost.errors import ModelConfigError


def check_signature(
    model_name: str, config: Any, inputs: Mapping[str, TensorInfo], outputs: Mapping[str, TensorInfo]
) -> None:
    check_io(model_name, config, inputs, outputs, fed_by_server=fed_by_server(config))
    for io in config.input:
        dims = inputs[io.name].dims
        if io.allow_ragged_batch and dims is not None and dims != (-1,):
            shape = "[" + ",".join(str(d) for d in dims) + "]"
            raise ModelConfigError(
                f"unable to load model '{model_name}', configuration expects model provides input with shape "
                f"[-1] for ragged input '{io.name}', model provides {shape}"
            )
    scattered = {name for b in config.batch_output for name in b.target_name}
    for io in config.output:
        dims = outputs[io.name].dims
        if dims is not None and io.name not in scattered:
            check_dims(model_name, io, dims, int(config.max_batch_size), exact=True)


def check_graph(
    model_name: str,
    config: Any,
    placeholders: Mapping[str, TensorInfo],
    outputs: Mapping[str, TensorInfo | None],
    unfed: Callable[[], Mapping[str, list[str]]],
) -> None:
    """`placeholders`: the graph's Placeholder nodes; `outputs`: each config output's tensor, None where the graph
    has no such node; `unfed()`: for each output, the Placeholders it needs that the config does not list."""
    for name, found in outputs.items():
        if found is None:
            raise ModelConfigError(
                f"unable to load model '{model_name}', configuration expects output '{name}' but the graph has "
                "no such node"
            )
    present = {name: info for name, info in outputs.items() if info is not None}
    check_io(model_name, config, placeholders, present, check_missing_inputs=False)
    for output, needs in unfed().items():
        raise ModelConfigError(
            f"unable to load model '{model_name}', output '{output}' needs Placeholder(s) {needs}, which the "
            "configuration does not list as inputs"
        )


__all__ = ["check_graph", "check_signature"]
