"""From scores to FIL's output__0 values and shapes (fil_backend src/tl_model.h, squeeze_output)."""

from __future__ import annotations

import numpy as np
import pytest

from modelhost.backends.fil.answers import OutputPlan, answer_shape

BINARY = np.array([[0.2], [0.5], [0.9]], dtype=np.float32)
MULTI = np.array([[0.2, 0.5, 0.3], [0.4, 0.2, 0.4]], dtype=np.float32)


def test_regressor_gives_the_scores() -> None:
    plan = OutputPlan(False, False, 0.5, 1)
    assert plan.widths == (1,)
    assert plan.decide(BINARY, 1) is BINARY


def test_binary_classifier_thresholds_strictly_above() -> None:
    plan = OutputPlan(True, False, 0.5, 1)
    assert plan.widths == (1,)
    assert plan.decide(BINARY, 1).ravel().tolist() == [0.0, 0.0, 1.0]
    assert OutputPlan(True, False, 0.1, 1).decide(BINARY, 1).ravel().tolist() == [1.0, 1.0, 1.0]


def test_binary_predict_proba_gives_one_or_both_probabilities() -> None:
    plan = OutputPlan(True, True, 0.5, 1)
    assert plan.widths == (1, 2)
    np.testing.assert_array_equal(plan.decide(BINARY, 1), BINARY)
    both = plan.decide(BINARY, 2)
    np.testing.assert_allclose(both, np.hstack([1 - BINARY, BINARY]))
    assert both.dtype == np.float32


def test_multiclass_classifier_gives_the_first_most_probable_class() -> None:
    plan = OutputPlan(True, False, 0.5, 3)
    assert plan.widths == (1,)
    assert plan.decide(MULTI, 1).tolist() == [[1.0], [0.0]]


def test_multiclass_predict_proba_and_regressor_mode_give_the_probabilities() -> None:
    assert OutputPlan(True, True, 0.5, 3).widths == (3,)
    assert OutputPlan(False, False, 0.5, 3).widths == (3,)
    assert OutputPlan(True, True, 0.5, 3).decide(MULTI, 3) is MULTI


@pytest.mark.parametrize(
    ("dims", "shape"),
    [((1,), [5]), ((2,), [5, 2]), ((3, 7), [5, 3, 7]), ((1, 3), [5, 3]), ((7,), [5, 7])],
)
def test_answers_drop_the_dims_of_size_one(dims: tuple[int, ...], shape: list[int]) -> None:
    assert answer_shape(5, dims) == shape


def test_descriptions_say_what_the_output_holds() -> None:
    assert (
        "1 value per row (the positive class's probability) or 2" in OutputPlan(True, True, 0.5, 1).describe()
    )
    assert "3-class classifier with predict_proba gives 3 values" in OutputPlan(True, True, 0.5, 3).describe()
    assert "class index" in OutputPlan(True, False, 0.5, 3).describe()
    assert "regressor" in OutputPlan(False, False, 0.5, 1).describe()
