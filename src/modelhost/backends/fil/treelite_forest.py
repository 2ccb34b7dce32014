"""Models only Treelite reads (legacy XGBoost binaries, Treelite checkpoints), predicted with Treelite's GTIL.

This is what Triton's FIL backend does on CPU for every model type: load with Treelite, predict with GTIL, with
FIL's one change to the model (`predict_proba` on a multi-class model replaces its post-processor by softmax,
or by identity_multiclass for models whose leaves hold class vectors, as scikit-learn forests do). GTIL gives
no SHAP values, so these model types cannot have a `treeshap_output`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import treelite

from modelhost.backends.fil.forest import ForestFacts, LoadOptions, Rows, Scores
from modelhost.backends.fil.library_errors import load_error, warnings_logged
from modelhost.errors import InternalError, ModelConfigError

# Treelite's TaskType enum (treelite/enum/task_type.h).
_BINARY_CLF = 0
_MULTI_CLF = 2
_NO_SHAP = (
    "no library modelhost uses computes SHAP values for model_type '{}' (Treelite's GTIL gives none); "
    "save the model as xgboost_json, xgboost_ubj or lightgbm to get treeshap_output"
)


def _field(model: treelite.Model, name: str) -> Any:
    return model.get_header_accessor().get_field(name)


def facts_of(model: treelite.Model, model_type: str, model_name: str) -> ForestFacts:
    """The facts of a Treelite model; multi-target models are refused, as FIL refuses them."""
    num_target = int(_field(model, "num_target")[0])
    if num_target != 1:
        raise ModelConfigError(
            f"unable to load model '{model_name}': the model has {num_target} targets, and FIL serves "
            "single-target models only"
        )
    task = int(_field(model, "task_type")[0])
    return ForestFacts(
        n_features=int(model.num_feature),
        n_classes=int(_field(model, "num_class")[0]),
        classifier=task in (_BINARY_CLF, _MULTI_CLF),
        trees=int(model.num_tree),
        no_shap_reason=_NO_SHAP.format(model_type),
    )


def apply_predict_proba(model: treelite.Model) -> None:
    """FIL's post-processor for `predict_proba` on a multi-class model (fil_backend src/tl_model.h)."""
    if int(_field(model, "task_type")[0]) != _MULTI_CLF:
        return
    vector_leaves = int(_field(model, "leaf_vector_shape")[1]) > 1
    model.get_header_accessor().set_field(
        "postprocessor", "identity_multiclass" if vector_leaves else "softmax"
    )


class TreeliteForest:
    def __init__(self, model: treelite.Model, facts: ForestFacts, threads: int, model_name: str) -> None:
        self.model = model
        self.facts = facts
        self.threads = threads
        self.model_name = model_name

    def scores(self, rows: Rows, threads: int | None = None) -> Scores:
        try:
            # (rows, targets, classes); FIL serves single-target models.
            predicted = treelite.gtil.predict(self.model, rows, nthread=threads or self.threads)
        except Exception as e:  # treelite.TreeliteError and friends: this batch fails, the model stays
            raise InternalError(f"treelite error for model '{self.model_name}': {e}") from e
        result: Scores = np.ascontiguousarray(predicted[:, 0, :], dtype=np.float32)
        return result

    def shap(self, rows: Rows) -> Scores:
        raise InternalError(f"model '{self.model_name}': {self.facts.no_shap_reason}")

    def close(self) -> None:
        del self.model


def read(path: Path, options: LoadOptions) -> treelite.Model:
    """A legacy XGBoost binary or a Treelite checkpoint, read as Triton's FIL reads it."""
    with warnings_logged(options.model_name):
        try:
            if options.model_type == "xgboost":
                return treelite.frontend.load_xgboost_model_legacy_binary(path)
            return treelite.Model.deserialize(path)
        except Exception as e:  # treelite.TreeliteError, and OSError for an unreadable file
            raise load_error(options.model_name, options.model_type, path, e) from e


def _refuse_json(path: Path, options: LoadOptions) -> None:
    """A JSON or UBJSON file named as a legacy binary (XGBoost 2+ writes UBJSON to any unknown extension):
    Treelite's legacy parser would fail on it with a puzzling message, so name the model_type that reads it."""
    with path.open("rb") as f:
        head = f.read(1)
    if options.model_type == "xgboost" and head == b"{":
        raise ModelConfigError(
            f"unable to load model '{options.model_name}': '{path}' is an XGBoost JSON or UBJSON model, not "
            "the legacy binary format that model_type 'xgboost' (the default) reads; set the parameter "
            "model_type to 'xgboost_ubj' (or 'xgboost_json')"
        )


def load(path: Path, options: LoadOptions) -> TreeliteForest:
    _refuse_json(path, options)
    model = read(path, options)
    facts = facts_of(model, options.model_type, options.model_name)
    if options.predict_proba:
        apply_predict_proba(model)
    return TreeliteForest(model, facts, options.threads, options.model_name)


__all__ = ["TreeliteForest", "apply_predict_proba", "facts_of", "load", "read"]
