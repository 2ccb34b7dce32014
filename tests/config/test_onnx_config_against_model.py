"""An ONNX model whose config contradicts the model's shapes is refused at load, naming the tensor, instead of
loading as READY and failing every request inside ONNX Runtime."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from modelhost.backends.api import BackendContext
from modelhost.backends.model_config import load_model_config
from modelhost.backends.onnxruntime.backend import OnnxRuntimeBackend
from modelhost.errors import ModelConfigError

from .conftest import add_sub_model


def load(model_dir: Path, config_text: str) -> None:
    (model_dir / "config.pbtxt").write_text(config_text)
    config = load_model_config(model_dir)
    ctx = BackendContext("sub", 1, model_dir, model_dir / "1", config)
    OnnxRuntimeBackend().load_instance(ctx, config.instance_group[0], 0, 0).close()


CONFIG = """
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ {dims} ] }},
        {{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }},
         {{ name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }} ]
"""


def test_matching_dims_load(tmp_path: Path) -> None:
    add_sub_model(tmp_path / "sub" / "1" / "model.onnx")
    load(tmp_path / "sub", CONFIG.format(dims="16"))


def test_contradicting_dims_are_refused_naming_the_tensor(tmp_path: Path) -> None:
    add_sub_model(tmp_path / "sub" / "1" / "model.onnx")
    with pytest.raises(ModelConfigError) as e:
        load(tmp_path / "sub", CONFIG.format(dims="8"))
    assert str(e.value).startswith(
        "model 'sub', tensor 'INPUT0': the model expects 2 dimensions (shape [-1,16]) but the model configuration "
        "specifies 2 dimensions"
    )
    assert "making complete shape [-1,8]" in str(e.value)


def test_a_contradicting_rank_is_refused(tmp_path: Path) -> None:
    add_sub_model(tmp_path / "sub" / "1" / "model.onnx")
    with pytest.raises(ModelConfigError, match=r"tensor 'INPUT0': the model expects 2 dimensions"):
        load(tmp_path / "sub", CONFIG.format(dims="4, 4"))


# Triton's ONNX Runtime backend counts the inputs first, then looks each config tensor up by name: its words,
# which Triton's qa suite L0_model_config greps for.
@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda c: re.sub(r',\s*\{ name: "INPUT1"[^}]*\}', "", c),
            "unable to load model 'sub', configuration expects 1 inputs, model provides 2",
        ),
        (
            lambda c: c.replace('name: "INPUT1"', 'name: "INPUT_UNKNOWN"'),
            "unexpected inference input 'INPUT_UNKNOWN', allowed inputs are: INPUT0, INPUT1",
        ),
        (
            lambda c: c.replace('name: "OUTPUT1"', 'name: "OUTPUT_UNKNOWN"'),
            "unexpected inference output 'OUTPUT_UNKNOWN', allowed outputs are: OUTPUT0, OUTPUT1",
        ),
    ],
)
def test_inputs_are_counted_and_names_looked_up_in_tritons_words(
    tmp_path: Path, edit: Callable[[str], str], message: str
) -> None:
    add_sub_model(tmp_path / "sub" / "1" / "model.onnx")
    text = edit(CONFIG.format(dims="16"))
    assert text != CONFIG.format(dims="16")
    with pytest.raises(ModelConfigError) as e:
        load(tmp_path / "sub", text)
    assert str(e.value) == message
