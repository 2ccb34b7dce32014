"""XGBoost JSON and UBJSON models, predicted with XGBoost's own predictor (and GTIL for the smallest batches).

Measured on CPU (benchmarks/fil_predictors.py, docs/backends/fil.md): `Booster.inplace_predict` costs about
135 us per call before the first tree, then 6-10 ns per tree and row; Treelite's GTIL costs ~25 us per call but
75-100 ns per tree and row. So XGBoost wins from a few rows up (2-10x at 64-1024 rows on one thread) and GTIL
wins for the smallest batches (2.5-5x for one row): batches of at most SMALL_BATCH_TREE_ROWS trees x rows go
to a GTIL copy of the model, built at load for models of at most that many trees. The copy is checked against
XGBoost on a few rows at load and dropped when they disagree (an objective Treelite post-processes differently),
so both give one answer.

SHAP values (`treeshap_output`) come from XGBoost's `pred_contribs`, the same path-dependent TreeSHAP that
FIL's CPU TreeSHAP computes.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import xgboost as xgb

from modelhost.backends.fil.forest import ForestFacts, LoadOptions, Rows, Scores, softmax
from modelhost.backends.fil.library_errors import load_error, reason, warnings_logged
from modelhost.errors import InternalError, ModelConfigError

if TYPE_CHECKING:  # imported where used: treelite is needed only for the small-batch copy
    from modelhost.backends.fil.treelite_forest import TreeliteForest

log = logging.getLogger(__name__)

# Crossover of the two predictors, in trees x rows (measured: 100 trees -> ~18 rows, 1000 trees -> ~2-3 rows).
SMALL_BATCH_TREE_ROWS = 2000
_FORMATS = {"xgboost_json": "JSON", "xgboost_ubj": "UBJSON"}


# Type markers that follow a UBJSON object's "{" (XGBoost writes "{L" then the first key's length).
_UBJSON_MARKERS = b"iUIlLdDSHCTFZN[{$#"


def file_format(raw: bytes) -> str:
    """ "JSON", "UBJSON", "other" (not starting with "{": the legacy binary format, or no XGBoost model at all)
    or "unknown" (a "{" then neither: a broken file, for XGBoost's parser to describe)."""
    text = raw.lstrip()
    if not text.startswith(b"{"):
        return "other"
    if text[1:2] and text[1:2] in _UBJSON_MARKERS:
        return "UBJSON"
    if text[1:].lstrip()[:1] in (b'"', b"}"):
        return "JSON"
    return "unknown"


def _check_format(raw: bytes, path: Path, options: LoadOptions) -> None:
    """The file must be in the format its model_type names, as FIL reads it with that format's parser only."""
    found = file_format(raw)
    expected = _FORMATS[options.model_type]
    if found in (expected, "unknown"):
        return
    if found == "other":
        problem = "not an XGBoost JSON or UBJSON model"
        hint = "model_type 'xgboost' reads XGBoost's legacy binary format"
    else:
        problem = f"an XGBoost {found} model, not {expected}"
        right = next(t for t, f in _FORMATS.items() if f == found)
        hint = f"set the parameter model_type to '{right}'"
    raise ModelConfigError(
        f"unable to load model '{options.model_name}': '{path}' is {problem} (model_type '{options.model_type}'): "
        f"{hint}"
    )


def _facts(booster: xgb.Booster, model_name: str) -> ForestFacts:
    learner = json.loads(booster.save_config())["learner"]
    params = learner["learner_model_param"]
    gbm = learner["gradient_booster"]
    if gbm["name"] not in ("gbtree", "dart"):
        raise ModelConfigError(
            f"unable to load model '{model_name}': FIL serves tree models, and this XGBoost model's booster is "
            f"'{gbm['name']}'"
        )
    if int(params.get("num_target", "1")) > 1:
        raise ModelConfigError(
            f"unable to load model '{model_name}': the model has {params['num_target']} targets, and FIL serves "
            "single-target models only"
        )
    trees_param = gbm["gbtree"]["gbtree_model_param"] if gbm["name"] == "dart" else gbm["gbtree_model_param"]
    objective = str(learner["objective"]["name"])
    return ForestFacts(
        n_features=int(params["num_feature"]),
        n_classes=max(1, int(params["num_class"])),
        classifier=objective.startswith(("binary:", "multi:")),
        trees=int(trees_param["num_trees"]),
    )


class XGBoostForest:
    def __init__(
        self, booster: xgb.Booster, facts: ForestFacts, options: LoadOptions, small: TreeliteForest | None
    ) -> None:
        self.booster = booster
        self.facts = facts
        self.threads = options.threads
        self.model_name = options.model_name
        self.small = small
        self.small_rows = (
            options.transfer_threshold if options.device else SMALL_BATCH_TREE_ROWS // max(1, facts.trees)
        )

    def _xgboost_scores(self, rows: Rows) -> Scores:
        if self.facts.n_classes > 1:
            # Margins, then softmax: Treelite (so FIL) applies softmax to both multi:softprob and multi:softmax,
            # whose XGBoost "value" would be the class index.
            margins = self.booster.inplace_predict(rows, predict_type="margin", validate_features=False)
            return softmax(np.asarray(margins).reshape(rows.shape[0], self.facts.n_classes))
        values = self.booster.inplace_predict(rows, validate_features=False)
        result: Scores = np.asarray(values, dtype=np.float32).reshape(rows.shape[0], 1)
        return result

    def scores(self, rows: Rows) -> Scores:
        if self.small is not None and rows.shape[0] <= self.small_rows:
            # A few rows: more threads would cost more than they give.
            return self.small.scores(rows, threads=1)
        try:
            return self._xgboost_scores(rows)
        except xgb.core.XGBoostError as e:
            raise InternalError(f"xgboost error for model '{self.model_name}': {reason(e)}") from e

    def shap(self, rows: Rows) -> Scores:
        try:
            matrix = xgb.DMatrix(rows, missing=np.nan, nthread=self.threads)
            contributions = self.booster.predict(matrix, pred_contribs=True, validate_features=False)
        except xgb.core.XGBoostError as e:
            raise InternalError(f"xgboost error for model '{self.model_name}': {reason(e)}") from e
        # (rows, features + 1) or (rows, classes, features + 1): class-major, bias last, as FIL lays it out.
        result: Scores = np.ascontiguousarray(contributions, dtype=np.float32).reshape(rows.shape[0], -1)
        return result

    def close(self) -> None:
        self.small = None
        del self.booster


def _probe_rows(n_features: int) -> Rows:
    """Rows to compare the two predictors on: random values, zeros, and missing values."""
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((8, n_features)).astype(np.float32) * 4
    rows[1] = 0
    rows[2, ::2] = np.nan
    return rows


def _small_batch_copy(
    booster: xgb.Booster, facts: ForestFacts, options: LoadOptions
) -> TreeliteForest | None:
    """A GTIL copy of the model for the smallest batches, when it is worth having and agrees with XGBoost."""
    if options.facts_only or facts.trees > SMALL_BATCH_TREE_ROWS:
        return None
    if options.device and options.transfer_threshold <= 0:
        return None
    try:
        import treelite

        from modelhost.backends.fil import treelite_forest

        with warnings_logged(options.model_name):
            # From XGBoost's own serialisation: keys this Treelite does not know yet are not the user's doing.
            model = treelite.frontend.from_xgboost_json(booster.save_raw("json"), allow_unknown_field=True)
        if options.predict_proba:
            treelite_forest.apply_predict_proba(model)
        copy = treelite_forest.TreeliteForest(
            model,
            treelite_forest.facts_of(model, options.model_type, options.model_name),
            1,
            options.model_name,
        )
        probe = _probe_rows(facts.n_features)
        expected = XGBoostForest(booster, facts, options, None)._xgboost_scores(probe)
        if not np.allclose(copy.scores(probe), expected, rtol=1e-4, atol=1e-5, equal_nan=True):
            log.info(
                "model '%s': Treelite predicts otherwise than XGBoost; XGBoost predicts every batch",
                options.model_name,
            )
            return None
        return copy
    except Exception as e:  # treelite missing, or a model Treelite cannot read: XGBoost predicts every batch
        log.info("model '%s': no Treelite copy for small batches (%s)", options.model_name, reason(e))
        return None


def load(path: Path, options: LoadOptions) -> XGBoostForest:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise load_error(options.model_name, options.model_type, path, e) from e
    _check_format(raw, path, options)
    try:
        booster = xgb.Booster()
        booster.load_model(bytearray(raw))
        booster.set_param({"nthread": options.threads})
        if options.device:
            booster.set_param({"device": options.device})
    except xgb.core.XGBoostError as e:
        raise load_error(options.model_name, options.model_type, path, e) from e
    facts = _facts(booster, options.model_name)
    return XGBoostForest(booster, facts, options, _small_batch_copy(booster, facts, options))


__all__ = ["SMALL_BATCH_TREE_ROWS", "XGBoostForest", "file_format", "load"]
