"""LightGBM text models (`model.txt`), predicted with LightGBM's own predictor.

Measured on CPU (benchmarks/fil_predictors.py, docs/backends/fil.md): LightGBM's `Booster.predict` beat
Treelite's GTIL at every batch size (1 to 1024 rows, 100 and 500 trees, one thread), so it predicts every batch.
It computes in double precision and FIL in single; answers are given in FP32 and agree to FP32 rounding.

FIL's one twist is kept: with `predict_proba`, a multi-class model's probabilities are the softmax of its raw
scores (FIL replaces the model's post-processor by softmax), which for `multiclassova` differs from LightGBM's
own per-class sigmoids. SHAP values come from LightGBM's `pred_contrib`, laid out as FIL lays them out.
"""

from __future__ import annotations

from pathlib import Path

import lightgbm as lgb
import numpy as np

from modelhost.backends.fil.forest import ForestFacts, LoadOptions, Rows, Scores, softmax
from modelhost.backends.fil.library_errors import load_error, reason
from modelhost.errors import InternalError

_CLASSIFIERS = ("binary", "multiclass", "multiclassova")


class LightGBMForest:
    def __init__(self, booster: lgb.Booster, facts: ForestFacts, options: LoadOptions) -> None:
        self.booster = booster
        self.facts = facts
        self.threads = options.threads
        self.model_name = options.model_name
        self.softmax = options.predict_proba and facts.n_classes > 1

    def scores(self, rows: Rows) -> Scores:
        try:
            predicted = self.booster.predict(rows, raw_score=self.softmax, num_threads=self.threads)
        except lgb.basic.LightGBMError as e:
            raise InternalError(f"lightgbm error for model '{self.model_name}': {reason(e)}") from e
        values = np.asarray(predicted).reshape(rows.shape[0], self.facts.n_classes)
        if self.softmax:
            return softmax(values)
        result: Scores = values.astype(np.float32)
        return result

    def shap(self, rows: Rows) -> Scores:
        try:
            # (rows, classes * (features + 1)): class-major, bias last, as FIL lays it out.
            contributions = self.booster.predict(rows, pred_contrib=True, num_threads=self.threads)
        except lgb.basic.LightGBMError as e:
            raise InternalError(f"lightgbm error for model '{self.model_name}': {reason(e)}") from e
        result: Scores = np.asarray(contributions, dtype=np.float32).reshape(rows.shape[0], -1)
        return result

    def close(self) -> None:
        del self.booster


def load(path: Path, options: LoadOptions) -> LightGBMForest:
    try:
        booster = lgb.Booster(model_file=path)
    except (lgb.basic.LightGBMError, OSError) as e:
        raise load_error(options.model_name, options.model_type, path, e) from e
    # The saved objective reads "binary sigmoid:1", "multiclass num_class:3": its first word names it.
    objective = str(booster.params.get("objective", "")).split(" ")[0]
    facts = ForestFacts(
        n_features=booster.num_feature(),
        n_classes=booster.num_model_per_iteration(),
        classifier=objective in _CLASSIFIERS,
        trees=booster.num_trees(),
    )
    return LightGBMForest(booster, facts, options)


__all__ = ["LightGBMForest", "load"]
