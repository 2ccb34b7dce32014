"""The ModelConfig of auto_complete_config and the config helpers, with Triton's errors."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from modelhost.backends.python import pb_utils


def model_config(**fields: Any) -> pb_utils.ModelConfig:
    return pb_utils.ModelConfig(
        json.dumps({"name": "m", "max_batch_size": 0, "input": [], "output": [], **fields})
    )


def test_model_config_auto_complete() -> None:
    config = model_config()
    config.set_max_batch_size(8)
    config.set_dynamic_batching()
    config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4]})
    config.add_input({"name": "OPT", "data_type": "TYPE_INT32", "dims": [1], "optional": True})
    config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]})
    config.set_model_transaction_policy({"decoupled": True})
    assert config.as_dict() == {
        "name": "m",
        "max_batch_size": 8,
        "dynamic_batching": {},
        "input": [
            {"name": "IN", "data_type": "TYPE_FP32", "dims": [4]},
            {"name": "OPT", "data_type": "TYPE_INT32", "dims": [1], "optional": True},
        ],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]}],
        "model_transaction_policy": {"decoupled": True},
    }
    # The stub builds it from a dict too.
    assert pb_utils.ModelConfig({"name": "x"}).as_dict() == {"name": "x"}


def test_model_config_errors_are_tritons() -> None:
    config = model_config(max_batch_size=16)
    with pytest.raises(
        ValueError, match=r"^configuration specified max_batch_size 16, but in auto-complete-config"
    ):
        config.set_max_batch_size(4)
    with pytest.raises(ValueError, match=r"tries to set scheduling_choice as 'dynamic_batching'"):
        model_config(sequence_batching={}).set_dynamic_batching()
    config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4]})
    with pytest.raises(
        ValueError,
        match=re.escape(
            "unable to load model 'm', configuration expects datatype TYPE_FP32 for input 'IN', model provides "
            "TYPE_INT8"
        ),
    ):
        config.add_input({"name": "IN", "data_type": "TYPE_INT8", "dims": [4]})
    with pytest.raises(ValueError, match=re.escape("the model expects dims [5] but the model configuration")):
        config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [5]})
    config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4]})  # the same again: no duplicate
    assert len(config.as_dict()["input"]) == 1
    with pytest.raises(
        ValueError, match=r"contains property other than 'name', 'data_type', 'dims' and 'optional'."
    ):
        config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [1], "format": "x"})
    with pytest.raises(ValueError, match=r"contains property other than 'name', 'data_type' and 'dims'."):
        config.add_output({"name": "X", "data_type": "TYPE_FP32", "dims": [1], "optional": True})
    with pytest.raises(
        ValueError, match=r"input 'X' in auto-complete-config function for model 'm' is missing 'dims'"
    ):
        config.add_input({"name": "X", "data_type": "TYPE_FP32"})
    with pytest.raises(ValueError, match=r"is missing 'name' property."):
        config.add_output({"data_type": "TYPE_FP32", "dims": [1]})
    # A config that names a tensor without a type: auto-complete fills it in.
    partial = model_config(output=[{"name": "OUT", "data_type": "TYPE_INVALID", "dims": []}])
    partial.add_output({"name": "OUT", "data_type": "TYPE_FP16", "dims": [2]})
    assert partial.as_dict()["output"] == [{"name": "OUT", "data_type": "TYPE_FP16", "dims": [2]}]
    decoupled = model_config(model_transaction_policy={"decoupled": False})
    with pytest.raises(ValueError, match=r"trying to change decoupled property .* already set to 'False'."):
        decoupled.set_model_transaction_policy({"decoupled": True})
    with pytest.raises(ValueError, match=r"contains property other than 'decoupled'."):
        decoupled.set_model_transaction_policy({"ordered": True})


def test_get_config_by_name() -> None:
    config = {"input": [{"name": "IN0", "data_type": "TYPE_INT32"}], "output": [{"name": "OUT"}]}
    assert pb_utils.get_input_config_by_name(config, "IN0") == {"name": "IN0", "data_type": "TYPE_INT32"}
    assert pb_utils.get_input_config_by_name(config, "X") is None
    assert pb_utils.get_output_config_by_name(config, "OUT") == {"name": "OUT"}
    assert pb_utils.get_output_config_by_name({}, "OUT") is None
    assert pb_utils.using_decoupled_model_transaction_policy(config) is False
    assert pb_utils.using_decoupled_model_transaction_policy(
        {"model_transaction_policy": {"decoupled": True}}
    )
