"""FIL auto-complete, a modelhost addition (Triton's FIL has none): what the model file says, nothing guessed.

Runs when auto-complete is on and the config lacks inputs, outputs or `is_classifier`; reads the model file of
the highest version (`default_model_filename`, else the model_type's default name) and fills only what is
missing:
- `is_classifier` (when neither it nor the old `output_class` is set): true when the model's objective is a
  classification one (XGBoost `binary:*`/`multi:*`, LightGBM binary/multiclass/multiclassova, a Treelite
  binary or multi-class task), else false;
- with inputs or outputs missing, as ONNX auto-complete does: an unset max_batch_size becomes the
  default-max-batch-size, and `dynamic_batching {}` is added when max_batch_size > 1 and no scheduler is set;
- `input__0` TYPE_FP32 with dims [ n_features ];
- `output__0` TYPE_FP32 with dims [ 1 ] (regressor, class index, or a binary classifier's positive-class
  probability) or [ n_classes ] (multi-class predict_proba, or a multi-class model served as a regressor).
`treeshap_output` is never added: SHAP values cost far more than predictions, so they stay opt-in.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from modelhost.backends.batching_fill import fill_batching
from modelhost.backends.fil.answers import OutputPlan
from modelhost.backends.fil.files import newest_model_file
from modelhost.backends.fil.forest import ForestFacts, LoadOptions, load_forest
from modelhost.backends.fil.io_check import INPUT, OUTPUT
from modelhost.backends.fil.settings import MODEL_FILES, configured_classifier, model_type
from modelhost.backends.params import bool_param
from modelhost.errors import ModelConfigError

log = logging.getLogger(__name__)


def _read_facts(config: ModelConfig, path: Path, kind: str, model_name: str) -> ForestFacts:
    options = LoadOptions(
        model_name,
        kind,
        allow_unknown_field=bool_param(config, "xgboost_allow_unknown_field", False),
        facts_only=True,
    )
    forest = load_forest(path, options)
    try:
        return forest.facts
    finally:
        forest.close()


def _add_tensor(tensors: Any, name: str, width: int, batching: bool) -> None:
    tensor = tensors.add()
    tensor.name = name
    tensor.data_type = DataType.Value("TYPE_FP32")
    tensor.dims.extend([width] if batching else [-1, width])


def autocomplete_fil(config: ModelConfig, model_dir: Path, *, default_max_batch_size: int) -> None:
    """Complete a FIL model's config in place from its model file."""
    model_name = config.name or model_dir.name
    missing_io = not config.input or not config.output
    classifier = configured_classifier(config)
    if not missing_io and classifier is not None:
        return
    kind = model_type(config)
    path = newest_model_file(model_dir, config.default_model_filename, kind)
    if path is None:
        if not missing_io:
            return  # the load names the missing file and the missing is_classifier
        name = config.default_model_filename or MODEL_FILES[kind]
        raise ModelConfigError(
            f"unable to autofill for '{model_name}': no version directory of {model_dir} contains '{name}' "
            f"(model_type '{kind}'), and the configuration does not specify both inputs and outputs"
        )
    facts = _read_facts(config, path, kind, model_name)
    if classifier is None:
        classifier = facts.classifier
        config.parameters["is_classifier"].string_value = "true" if classifier else "false"
        log.info("autofilled is_classifier to %s for model '%s' from its objective", classifier, model_name)
    if not missing_io:
        return
    fill_batching(config, model_name, default_max_batch_size)
    batching = config.max_batch_size > 0
    if not config.input:
        _add_tensor(config.input, INPUT, facts.n_features, batching)
    if not config.output:
        plan = OutputPlan(classifier, bool_param(config, "predict_proba", False), 0.5, facts.n_classes)
        _add_tensor(config.output, OUTPUT, plan.widths[0], batching)


__all__ = ["autocomplete_fil"]
