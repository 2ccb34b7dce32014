from __future__ import annotations

import pytest
from google.protobuf import text_format  # type: ignore[import-untyped]
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from modelhost.config.normalize import normalize_config

CPU, GPU, AUTO, MODEL = (
    ModelInstanceGroup.KIND_CPU,
    ModelInstanceGroup.KIND_GPU,
    ModelInstanceGroup.KIND_AUTO,
    ModelInstanceGroup.KIND_MODEL,
)


def _normalized(text: str, gpu_count: int = 0, name: str = "m") -> ModelConfig:
    config = text_format.Parse(text, ModelConfig())
    normalize_config(config, name, gpu_count=gpu_count)
    return config


def _groups(config: ModelConfig) -> list[tuple[str, int, int, list[int]]]:
    return [(g.name, g.count, g.kind, list(g.gpus)) for g in config.instance_group]


def test_defaults() -> None:
    config = _normalized('backend: "python"')
    assert config.name == "m"
    assert config.version_policy.WhichOneof("policy_choice") == "latest"
    assert config.version_policy.latest.num_versions == 1
    assert config.optimization.input_pinned_memory.enable
    assert config.optimization.output_pinned_memory.enable
    assert _groups(config) == [("m", 1, CPU, [])]


def test_given_values_kept() -> None:
    config = _normalized(
        'name: "m" backend: "python" version_policy { all {} }'
        " optimization { input_pinned_memory { enable: false } }"
    )
    assert config.version_policy.WhichOneof("policy_choice") == "all"
    assert not config.optimization.input_pinned_memory.enable
    assert config.optimization.output_pinned_memory.enable


def test_onnxruntime_cpu_default_count_is_two() -> None:
    assert _groups(_normalized('backend: "onnxruntime"')) == [("m", 2, CPU, [])]
    assert _groups(_normalized('backend: "onnxruntime"', gpu_count=1)) == [("m", 1, GPU, [0])]


def test_explicit_groups() -> None:
    config = _normalized(
        'backend: "onnxruntime" instance_group [ { kind: KIND_CPU }, { name: "g" count: 3 kind: KIND_GPU },'
        " { kind: KIND_GPU gpus: [1] }, { count: 0 } ]",
        gpu_count=2,
    )
    assert _groups(config) == [
        ("m_0", 2, CPU, []),
        ("g", 3, GPU, [0, 1]),
        ("m_2", 1, GPU, [1]),
        ("m_3", 1, GPU, [0, 1]),
    ]


def test_kind_auto_without_gpus_is_cpu() -> None:
    config = _normalized('backend: "python" instance_group [ { count: 4 } ]')
    assert _groups(config) == [("m_0", 4, CPU, [])]


def test_kind_auto_with_missing_gpu_is_cpu() -> None:
    config = _normalized('backend: "python" instance_group [ { gpus: [5] } ]', gpu_count=2)
    assert _groups(config)[0][2] == CPU


def test_negative_count_gets_default() -> None:
    config = _normalized('backend: "python" instance_group [ { count: -3 kind: KIND_MODEL } ]')
    assert _groups(config) == [("m_0", 1, MODEL, [])]


def test_gpu_group_without_gpus_on_cpu_server_stays_empty() -> None:
    config = _normalized('backend: "python" instance_group [ { kind: KIND_GPU } ]')
    assert _groups(config) == [("m_0", 1, GPU, [])]


def test_dynamic_batching_preferred_batch_size() -> None:
    assert list(
        _normalized("max_batch_size: 8 dynamic_batching {}").dynamic_batching.preferred_batch_size
    ) == [8]
    given = _normalized("max_batch_size: 8 dynamic_batching { preferred_batch_size: [2, 4] }")
    assert list(given.dynamic_batching.preferred_batch_size) == [2, 4]
    unbatched = _normalized("dynamic_batching {}")
    assert unbatched.HasField("dynamic_batching")
    assert list(unbatched.dynamic_batching.preferred_batch_size) == []


def test_sequence_batching() -> None:
    config = _normalized("max_batch_size: 4 sequence_batching { oldest {} }")
    assert config.sequence_batching.max_sequence_idle_microseconds == 1_000_000
    assert list(config.sequence_batching.oldest.preferred_batch_size) == [4]
    kept = _normalized("sequence_batching { max_sequence_idle_microseconds: 5 direct {} }")
    assert kept.sequence_batching.max_sequence_idle_microseconds == 5


def test_ensemble_gets_no_instances_nor_optimization() -> None:
    config = _normalized('platform: "ensemble" ensemble_scheduling { step [ { model_name: "a" } ] }')
    assert len(config.instance_group) == 0
    assert not config.HasField("optimization")
    assert config.version_policy.latest.num_versions == 1


def test_idempotent() -> None:
    config = _normalized('backend: "onnxruntime" max_batch_size: 4 dynamic_batching {}', gpu_count=1)
    again = ModelConfig()
    again.CopyFrom(config)
    normalize_config(again, "m", gpu_count=1)
    assert again == config


def test_a_backend_that_cannot_run_on_a_gpu_here_gets_cpu_instances_on_a_gpu_host(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = text_format.Parse(
        'backend: "onnxruntime" instance_group [ {}, { kind: KIND_GPU } ]', ModelConfig()
    )
    normalize_config(config, "m", gpu_count=1, gpu_backend=False)
    # KIND_AUTO becomes the CPU, with a warning; a group that asks for the GPU keeps it (its load says why not).
    assert _groups(config) == [("m_0", 2, CPU, []), ("m_1", 1, GPU, [0])]
    assert "cannot run on a GPU here" in caplog.text and "'m_0'" in caplog.text
    caplog.clear()
    normalize_config(config, "m", gpu_count=1, gpu_backend=False)
    assert "cannot run on a GPU here" not in caplog.text  # said once, not again at the second pass
