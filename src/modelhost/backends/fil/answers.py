"""From the model's scores to FIL's outputs (fil_backend src/tl_model.h, rapids_triton shared_state.hpp).

`output__0` per row, with C the model's class count as FIL counts it (1 for regressors and binary classifiers):
- is_classifier false: the model's C scores as its objective transforms them (a regression value, or for a
  binary/multi-class model its probabilities);
- binary classifier: 1.0 where the probability is above `threshold`, else 0.0; with predict_proba, the
  probability of the positive class when the output holds 1 value per row, [1 - p, p] when it holds 2;
- multi-class classifier: the index of the most probable class (the first one on a tie); with predict_proba,
  the C probabilities.

Shapes: FIL writes flat rows and answers each output with the config's dims minus every dimension of size 1
(RAPIDS-Triton's `squeeze_output`, kept in FIL for compatibility with its first releases): `dims: [ 1 ]` gives
shape [batch], `dims: [ 3 ]` [batch, 3], a multi-class `treeshap_output` of `dims: [ 3, 33 ]` [batch, 3, 33].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from modelhost.backends.fil.forest import Scores


@dataclass(frozen=True, slots=True)
class OutputPlan:
    classifier: bool
    predict_proba: bool
    threshold: float
    n_classes: int

    @property
    def widths(self) -> tuple[int, ...]:
        """The values per row `output__0` may hold."""
        if not self.classifier:
            return (self.n_classes,)
        if not self.predict_proba:
            return (1,)
        return (1, 2) if self.n_classes == 1 else (self.n_classes,)

    def describe(self) -> str:
        """What output__0 holds, for load errors."""
        if not self.classifier:
            what = (
                "a regressor (is_classifier false)"
                if self.n_classes == 1
                else (
                    f"a {self.n_classes}-class model served with is_classifier false (its class probabilities)"
                )
            )
            return f"{what} gives {self.n_classes} value(s) per row"
        if not self.predict_proba:
            return "a classifier without predict_proba gives 1 value per row (the class index)"
        if self.n_classes == 1:
            return (
                "a binary classifier with predict_proba gives 1 value per row (the positive class's probability) "
                "or 2 (both classes' probabilities)"
            )
        return f"a {self.n_classes}-class classifier with predict_proba gives {self.n_classes} values per row"

    def decide(self, scores: Scores, width: int) -> Scores:
        """(rows, width) float32 from the model's (rows, n_classes) scores."""
        if not self.classifier:
            return scores
        if self.n_classes == 1:
            if not self.predict_proba:
                return (scores > np.float32(self.threshold)).astype(np.float32)
            if width == 2:
                return np.concatenate((1 - scores, scores), axis=1)
            return scores
        if not self.predict_proba:
            classes: Scores = np.argmax(scores, axis=1).astype(np.float32).reshape(-1, 1)
            return classes
        return scores


def answer_shape(rows: int, per_row_dims: Sequence[int]) -> list[int]:
    """The shape FIL answers with: the rows, then the config's dims without their 1s."""
    return [rows, *(d for d in per_row_dims if d != 1)]


__all__ = ["OutputPlan", "answer_shape"]
