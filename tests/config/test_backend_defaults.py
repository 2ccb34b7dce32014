"""Defaults that depend on a model's backend: the instance kind of a CPU-only backend, and the default
max_batch_size auto-complete gives (--backend-config=<backend>,default-max-batch-size)."""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from modelhost.backends.model_config import load_model_config
from modelhost.config.normalize import normalize_config

from .conftest import add_sub_model


def test_an_openvino_model_without_instance_groups_runs_on_the_cpu_of_a_gpu_host() -> None:
    config = ModelConfig(name="m", backend="openvino")
    normalize_config(config, "m", gpu_count=1)
    assert [g.kind for g in config.instance_group] == [ModelInstanceGroup.KIND_CPU]
    other = ModelConfig(name="m", backend="onnxruntime")
    normalize_config(other, "m", gpu_count=1)
    assert [g.kind for g in other.instance_group] == [ModelInstanceGroup.KIND_GPU]


def test_the_default_max_batch_size_of_the_models_backend_wins_over_the_global_one(tmp_path: Path) -> None:
    add_sub_model(tmp_path / "sub" / "1" / "model.onnx")
    defaults = {"": 4, "onnxruntime": 16, "openvino": 2}
    assert load_model_config(tmp_path / "sub", default_max_batch_size=defaults).max_batch_size == 16
    assert load_model_config(tmp_path / "sub", default_max_batch_size={"": 8}).max_batch_size == 8
    assert load_model_config(tmp_path / "sub", default_max_batch_size={"openvino": 2}).max_batch_size == 4
