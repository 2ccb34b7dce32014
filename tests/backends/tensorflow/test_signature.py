"""Reading a SavedModel's signature from its protobuf: tag sets, signature keys, types and shapes, bad files."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from modelhost.backends.model_io import TensorInfo
from modelhost.backends.tensorflow.signature import read_signature
from modelhost.errors import ModelConfigError

from .conftest import ModelFactory
from .models import bfloat16, matmul, one_signature, tagged, two_signatures, unknown_rank

SERVE = frozenset({"serve"})


def _savedmodel(model_dir: Path) -> Path:
    return model_dir / "1" / "model.savedmodel"


def test_default_signature(make_model: ModelFactory) -> None:
    signature = read_signature(_savedmodel(make_model("mm", matmul)), "mm", SERVE, None)
    assert signature.key == "serving_default"
    assert signature.inputs == {
        "s": TensorInfo("s", "TYPE_STRING", (-1,)),
        "x": TensorInfo("x", "TYPE_FP32", (-1, 3)),
    }
    assert signature.outputs["y"] == TensorInfo("y", "TYPE_FP32", (-1, 1))


def test_named_signature(make_model: ModelFactory) -> None:
    signature = read_signature(_savedmodel(make_model("two", two_signatures)), "two", SERVE, "scale")
    assert list(signature.outputs) == ["scaled"]


def test_unknown_signature(make_model: ModelFactory) -> None:
    with pytest.raises(ModelConfigError) as caught:
        read_signature(_savedmodel(make_model("two", two_signatures)), "two", SERVE, "nope")
    assert str(caught.value) == (
        "unable to load model 'two': the SavedModel has no signature 'nope' (parameter TF_SIGNATURE_DEF); its "
        "signatures are ['scale', 'serving_default']"
    )


def test_the_only_signature_stands_in_for_serving_default(
    make_model: ModelFactory, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        signature = read_signature(_savedmodel(make_model("p", one_signature("predict"))), "p", SERVE, None)
    assert signature.key == "predict"
    assert (
        "unable to find default serving signature 'serving_default', using signature 'predict'" in caplog.text
    )


def test_unknown_tag(make_model: ModelFactory) -> None:
    with pytest.raises(
        ModelConfigError, match=r"no MetaGraph tagged 'gpu' \(parameter TF_GRAPH_TAG\); its tag sets"
    ):
        read_signature(_savedmodel(make_model("mm", matmul)), "mm", frozenset({"gpu"}), None)


def test_tag_set(make_model: ModelFactory) -> None:
    path = _savedmodel(make_model("t", tagged(["serve", "tpu"])))
    assert read_signature(path, "t", frozenset({"tpu", "serve"}), None).key == "serving_default"
    with pytest.raises(ModelConfigError, match=r"its tag sets are \['serve,tpu'\]"):
        read_signature(path, "t", SERVE, None)


def test_unknown_rank(make_model: ModelFactory) -> None:
    signature = read_signature(_savedmodel(make_model("any", unknown_rank)), "any", SERVE, None)
    assert signature.inputs["x"].dims is None


def test_unsupported_datatype(make_model: ModelFactory) -> None:
    with pytest.raises(
        ModelConfigError, match="unable to process input 'x' for 'bf', unsupported datatype 'DT_BFLOAT16'"
    ):
        read_signature(_savedmodel(make_model("bf", bfloat16)), "bf", SERVE, None)


def test_corrupt_savedmodel(make_model: ModelFactory) -> None:
    path = _savedmodel(make_model("mm", matmul))
    (path / "saved_model.pb").write_bytes(b"\x0a\xff\xff not a protobuf")
    with pytest.raises(ModelConfigError, match="unable to load model 'mm': failed to read the SavedModel in"):
        read_signature(path, "mm", SERVE, None)


def test_not_a_savedmodel(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="is not a SavedModel directory"):
        read_signature(tmp_path, "empty", SERVE, None)
