"""A loaded tree model ("forest"), whatever library reads it: what the rest of the backend needs from it.

`load_forest` picks the module for the config's `model_type` and imports it only then, so that a model type
whose library is missing (lightgbm, say) fails that model's load with the package to install, while models of
the other types load. Which predictor each type uses was measured (benchmarks/fil_predictors.py, docs/backends/
fil.md): XGBoost JSON/UBJSON models predict with XGBoost's own predictor, with Treelite's GTIL for the smallest
batches; LightGBM models with LightGBM's; legacy XGBoost binaries and Treelite checkpoints, which only Treelite
reads, with GTIL (as Triton's FIL does on CPU).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from modelhost.errors import ModelConfigError

Rows = npt.NDArray[np.float32]
Scores = npt.NDArray[np.float32]

# model_type -> the module of this package that loads it.
_MODULES = {
    "xgboost": "treelite_forest",
    "xgboost_json": "xgboost_forest",
    "xgboost_ubj": "xgboost_forest",
    "lightgbm": "lightgbm_forest",
    "treelite_checkpoint": "treelite_forest",
}
_FRAMEWORKS = ("xgboost", "lightgbm", "treelite")


@dataclass(frozen=True, slots=True)
class ForestFacts:
    """What the model file says about the model's inputs and outputs."""

    n_features: int
    # Outputs per row before FIL's post-processing, counted as Treelite and FIL count them: 1 for regressors and
    # binary classifiers, the class count for multi-class classifiers.
    n_classes: int
    # The model's objective is a classification one (auto-complete's `is_classifier`).
    classifier: bool
    trees: int
    # None when the model can give SHAP values (`treeshap_output`); else why it cannot.
    no_shap_reason: str | None = None


class Forest(Protocol):
    facts: ForestFacts

    def scores(self, rows: Rows) -> Scores:
        """(rows, n_classes) float32: the model's prediction after its own objective's transform (probabilities
        for classifiers), as Treelite's GTIL gives it, with FIL's softmax for multi-class `predict_proba`."""
        ...

    def shap(self, rows: Rows) -> Scores:
        """(rows, n_classes * (n_features + 1)) float32: per class, each feature's SHAP value then the bias."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class LoadOptions:
    model_name: str
    model_type: str
    predict_proba: bool = False
    allow_unknown_field: bool = False
    threads: int = 1
    # "cuda:N" to predict on GPU N where the library can (XGBoost built with CUDA), else None.
    device: str | None = None
    # On GPU, batches of at most this many rows are predicted on CPU (FIL's transfer_threshold).
    transfer_threshold: int = 0
    # Auto-complete reads the facts only: no second, small-batch predictor is built.
    facts_only: bool = False


def load_forest(path: Path, options: LoadOptions) -> Forest:
    """The model in `path`, or ModelConfigError with the reason (missing library, unreadable file)."""
    name = _MODULES[options.model_type]
    try:
        module = importlib.import_module(f"modelhost.backends.fil.{name}")
    except ModuleNotFoundError as e:
        missing = (e.name or "").partition(".")[0]
        if missing in _FRAMEWORKS:
            raise ModelConfigError(
                f"unable to load model '{options.model_name}': model_type '{options.model_type}' needs the "
                f"Python package '{missing}', which is not installed; install it with: pip install 'modelhost[fil]'"
            ) from e
        raise
    forest: Forest = module.load(path, options)
    return forest


def softmax(margins: npt.NDArray[Any]) -> Scores:
    """Row-wise softmax in float32, as FIL's softmax post-processor computes it."""
    shifted = margins.astype(np.float32, copy=False) - margins.max(axis=1, keepdims=True)
    exp = np.exp(shifted, dtype=np.float32)
    result: Scores = exp / exp.sum(axis=1, keepdims=True, dtype=np.float32)
    return result


__all__ = ["Forest", "ForestFacts", "LoadOptions", "Rows", "Scores", "load_forest", "softmax"]
