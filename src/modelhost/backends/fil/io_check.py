"""Refusing at load a config that contradicts the model file: names, FP32, the feature and output counts.

Triton's FIL checks none of this: it reads rows of the config's width and writes outputs of the config's size,
so a wrong `dims` there gives garbage or a crash per request. modelhost refuses such a config at load with the
field named (a modelhost addition; a config that is right loads the same way).

Shapes as FIL reads them: `input__0` is [batch, n_features] (so `dims: [ n_features ]` with max_batch_size > 0,
`[ -1, n_features ]` without), and each output's dims per row are fixed (FIL allocates them up front), their
product the number of values FIL writes per row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from modelhost.backends.fil.answers import OutputPlan
from modelhost.backends.fil.forest import ForestFacts
from modelhost.backends.model_io import TensorInfo, check_io, config_shape
from modelhost.errors import ModelConfigError

INPUT = "input__0"
OUTPUT = "output__0"
SHAP_OUTPUT = "treeshap_output"


@dataclass(frozen=True, slots=True)
class OutputLayout:
    per_row_dims: tuple[int, ...]

    @property
    def width(self) -> int:
        return math.prod(self.per_row_dims)


def per_row_dims(tensor: Any, max_batch_size: int) -> tuple[int, ...]:
    """An output's dims per row: FIL puts the batch before the config's dims unless they start with -1."""
    shape = config_shape(tensor)
    if max_batch_size == 0 and shape and shape[0] == -1:
        shape = shape[1:]
    return tuple(shape)


def _shape(dims: tuple[int, ...]) -> str:
    return "[ " + ", ".join(str(d) for d in dims) + " ]"


def _check_features(model_name: str, config: Any, facts: ForestFacts) -> None:
    for tensor in config.input:
        if tensor.name != INPUT:
            continue
        dims = config_shape(tensor)
        features = dims[-1] if dims else None
        if features is not None and features != -1 and features != facts.n_features:
            expected = (
                f"[ {facts.n_features} ]" if config.max_batch_size > 0 else f"[ -1, {facts.n_features} ]"
            )
            raise ModelConfigError(
                f"unable to load model '{model_name}': input '{INPUT}' has dims {_shape(tuple(dims))} in the "
                f"configuration, but the model takes {facts.n_features} features (dims {expected})"
            )


def _check_output(
    model_name: str, name: str, layout: OutputLayout, facts: ForestFacts, plan: OutputPlan
) -> None:
    dims = layout.per_row_dims
    if not dims or any(d < 0 for d in dims):
        raise ModelConfigError(
            f"unable to load model '{model_name}': output '{name}' has dims {_shape(dims)} per row in the "
            "configuration; FIL outputs have fixed dims"
        )
    if name == OUTPUT and layout.width not in plan.widths:
        allowed = " or ".join(f"[ {w} ]" for w in plan.widths)
        raise ModelConfigError(
            f"unable to load model '{model_name}': output '{OUTPUT}' has dims {_shape(dims)} ({layout.width} "
            f"value(s) per row) in the configuration, but {plan.describe()}: its dims must be {allowed}"
        )
    if name == SHAP_OUTPUT:
        if facts.no_shap_reason is not None:
            raise ModelConfigError(
                f"unable to load model '{model_name}': output '{SHAP_OUTPUT}': {facts.no_shap_reason}"
            )
        width = facts.n_classes * (facts.n_features + 1)
        if layout.width != width:
            expected = (
                f"[ {facts.n_features + 1} ]"
                if facts.n_classes == 1
                else f"[ {facts.n_classes}, {facts.n_features + 1} ]"
            )
            raise ModelConfigError(
                f"unable to load model '{model_name}': output '{SHAP_OUTPUT}' has dims {_shape(dims)} in the "
                f"configuration, but the model gives {width} SHAP values per row ({facts.n_classes} class(es) x "
                f"({facts.n_features} features + the bias)): its dims must be {expected}"
            )


def check_model_config(
    model_name: str, config: Any, facts: ForestFacts, plan: OutputPlan
) -> dict[str, OutputLayout]:
    """The per-row layout of each configured output, or ModelConfigError naming what contradicts the model."""
    _check_features(model_name, config, facts)
    fp32_rows = TensorInfo(INPUT, "TYPE_FP32", (-1, facts.n_features))
    outputs = {OUTPUT: TensorInfo(OUTPUT, "TYPE_FP32"), SHAP_OUTPUT: TensorInfo(SHAP_OUTPUT, "TYPE_FP32")}
    check_io(model_name, config, {INPUT: fp32_rows}, outputs)
    layouts = {t.name: OutputLayout(per_row_dims(t, int(config.max_batch_size))) for t in config.output}
    if OUTPUT not in layouts:
        raise ModelConfigError(
            f"unable to load model '{model_name}': the configuration has no output '{OUTPUT}', which FIL always "
            "writes"
        )
    for name, layout in layouts.items():
        _check_output(model_name, name, layout, facts, plan)
    return layouts


__all__ = ["INPUT", "OUTPUT", "SHAP_OUTPUT", "OutputLayout", "check_model_config", "per_row_dims"]
