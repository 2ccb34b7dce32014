"""Loading TensorRT instances on a fake runtime: device kinds, plan files, plans TensorRT refuses, the config
checked against the engine, profiles, settings."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup
from trt_fakes import (
    FakeRuntime,
    batch_engine,
    context,
    dynamic_input,
    engine,
    gpu_config,
    output,
    static_input,
    write_plan,
)

from modelhost.backends.tensorrt.engine import EngineDescription, EngineTensor
from modelhost.backends.tensorrt.instance import TensorRTInstance
from modelhost.backends.tensorrt.loader import EngineCache, load_instance
from modelhost.backends.tensorrt.runtime import plan_failure_message
from modelhost.errors import BackendInvalidArgument, ModelConfigError, Unavailable
from modelhost.host import gpu_memory
from modelhost.host.gpu_memory import GpuMemory, GpuUsage

BATCH_CONFIG = """
max_batch_size: 8
input { name: "x" data_type: TYPE_FP32 dims: [3] }
output { name: "y" data_type: TYPE_FP32 dims: [2] }
"""


def _load(
    tmp_path: Path,
    cfg: ModelConfig,
    runtime: FakeRuntime,
    *,
    index: int = 0,
    device_id: int = 0,
    cache: EngineCache | None = None,
    **ctx_args: object,
) -> object:
    model_dir = tmp_path / cfg.name
    if not (model_dir / "1" / "model.plan").exists():
        write_plan(model_dir)
    ctx = context(model_dir, cfg, **ctx_args)  # type: ignore[arg-type]
    return load_instance(ctx, cfg.instance_group[0], index, device_id, runtime, cache or EngineCache())


def _runtime(description: EngineDescription | None = None) -> FakeRuntime:
    return FakeRuntime(engines={b"plan": description or batch_engine()})


def test_an_instance_loads_with_its_profile_settings_and_device(tmp_path: Path) -> None:
    runtime = _runtime()
    instance = _load(tmp_path, gpu_config(BATCH_CONFIG), runtime)
    assert instance.name == "trt_0"  # type: ignore[attr-defined]
    executor = runtime.loaded[0].executors[0]
    assert (executor.profiles, executor.device_id, executor.max_batch_size) == ([0], 0, 8)
    assert executor.settings.allocation_strategy == "STATIC"
    assert executor.settings.priority == "DEFAULT"
    assert runtime.deserialized == [(b"plan", 0, False)]


@pytest.mark.parametrize("kind", [ModelInstanceGroup.KIND_CPU, ModelInstanceGroup.KIND_MODEL])
def test_every_kind_but_gpu_is_refused_with_tritons_message(tmp_path: Path, kind: int) -> None:
    cfg = gpu_config(BATCH_CONFIG)
    cfg.instance_group[0].kind = kind  # type: ignore[assignment]
    del cfg.instance_group[0].gpus[:]
    with pytest.raises(ModelConfigError) as e:
        _load(tmp_path, cfg, _runtime())
    assert str(e.value) == "unable to load model 'trt', TensorRT backend supports only GPU device"


def test_kind_gpu_without_a_gpu_is_a_clear_load_error(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError) as e:
        _load(tmp_path, gpu_config(BATCH_CONFIG), _runtime(), gpu_count=0)
    assert str(e.value) == (
        "unable to load model 'trt': instance group kind KIND_GPU needs a GPU, and none is visible"
    )


def test_a_gpu_cuda_cannot_see_is_a_clear_load_error(tmp_path: Path) -> None:
    runtime = _runtime()
    runtime.devices = 1
    with pytest.raises(ModelConfigError, match=r"GPU 1 is not visible to CUDA \(1 device\(s\) visible\)"):
        _load(tmp_path, gpu_config(BATCH_CONFIG), runtime, device_id=1, gpu_count=2)


def test_a_cuda_failure_while_counting_devices_names_the_model(tmp_path: Path) -> None:
    runtime = _runtime()

    def broken() -> int:
        raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")

    runtime.device_count = broken  # type: ignore[method-assign]
    with pytest.raises(
        ModelConfigError,
        match="unable to load model 'trt': cannot count the CUDA devices: cudaErrorInsufficientDriver",
    ):
        _load(tmp_path, gpu_config(BATCH_CONFIG), runtime)


def test_a_missing_plan_is_named(tmp_path: Path) -> None:
    cfg = gpu_config(BATCH_CONFIG + 'default_model_filename: "other.plan"')
    with pytest.raises(ModelConfigError) as e:
        _load(tmp_path, cfg, _runtime())
    assert (
        str(e.value) == f"unable to find '{tmp_path / 'trt' / '1' / 'other.plan'}' for model instance 'trt_0'"
    )


def test_the_plan_of_the_gpus_compute_capability_is_used(tmp_path: Path) -> None:
    cfg = gpu_config(
        BATCH_CONFIG + 'cc_model_filenames { key: "8.6" value: "model_86.plan" } '
        'cc_model_filenames { key: "9.0" value: "model_90.plan" }'
    )
    write_plan(tmp_path / "trt", filename="model_86.plan", data=b"sm86")
    write_plan(tmp_path / "trt", filename="model_90.plan", data=b"sm90")
    runtime = FakeRuntime(engines={b"sm86": batch_engine(), b"sm90": batch_engine()}, capability="9.0")
    _load(tmp_path, cfg, runtime)
    assert runtime.deserialized[0][0] == b"sm90"


VERSION_ERROR = (
    "IRuntime::deserializeCudaEngine: Error Code 6: API Usage Error (The engine plan file is not compatible with "
    "this version of TensorRT, expecting library version 10.3.0.26 got 10.0.1.6, please rebuild.)"
)


def test_a_plan_of_another_tensorrt_version_says_so_and_what_to_do(tmp_path: Path) -> None:
    runtime = FakeRuntime(errors=[VERSION_ERROR], version="10.3.0.26")
    with pytest.raises(ModelConfigError) as e:
        _load(tmp_path, gpu_config(BATCH_CONFIG), runtime)
    message = str(e.value)
    plan = tmp_path / "trt" / "1" / "model.plan"
    assert message.startswith(
        f"unable to load model 'trt': TensorRT 10.3.0.26 cannot load the plan '{plan}': it was "
        "built by another TensorRT version"
    )
    assert f"modelhost convert onnx-to-tensorrt --onnx model.onnx --output {plan}" in message
    assert "--backend-config=tensorrt,version-compatible=true" in message
    assert VERSION_ERROR in message


@pytest.mark.parametrize(
    ("logged", "expected"),
    [
        (
            "The engine plan file is generated on an incompatible device, expecting compute 8.6 got compute 7.5, "
            "please rebuild.",
            "built for another GPU architecture",
        ),
        (
            "Serialization assertion magicTagRead == kMAGIC_TAG failed.Magic tag does not match",
            "not a TensorRT plan",
        ),
        (
            "Cannot deserialize engine with lean runtime: host code is not allowed (setEngineHostCodeAllowed)",
            "it is a version-compatible plan",
        ),
        ("something else entirely", "(TensorRT said: something else entirely)"),
    ],
)
def test_plans_tensorrt_refuses_get_the_reason(logged: str, expected: str) -> None:
    message = plan_failure_message(
        "m", Path("/r/m/1/model.plan"), [logged], "10.3.0", version_compatible=False
    )
    assert message.startswith(
        "unable to load model 'm': TensorRT 10.3.0 cannot load the plan '/r/m/1/model.plan'"
    )
    assert expected in message


def test_backend_config_version_compatible_and_plugins_reach_the_runtime(tmp_path: Path) -> None:
    runtime = _runtime()
    _load(
        tmp_path,
        gpu_config(BATCH_CONFIG),
        runtime,
        backend_config={"version-compatible": "true", "plugins": "/p/a.so;/p/b.so"},
    )
    assert runtime.deserialized == [(b"plan", 0, True)]
    assert runtime.plugins == ["/p/a.so", "/p/b.so"]


def test_a_bad_backend_config_value_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="version-compatible must be 'true' or 'false', got 'maybe'"):
        _load(tmp_path, gpu_config(BATCH_CONFIG), _runtime(), backend_config={"version-compatible": "maybe"})
    with pytest.raises(ModelConfigError, match="execution-policy must be DEVICE_BLOCKING or BLOCKING"):
        _load(tmp_path, gpu_config(BATCH_CONFIG), _runtime(), backend_config={"execution-policy": "FAST"})


def test_allocation_strategy_and_priority_are_honoured(tmp_path: Path) -> None:
    cfg = gpu_config(
        BATCH_CONFIG
        + 'parameters { key: "execution_context_allocation_strategy" value { string_value: "ON_PROFILE_CHANGE" } }'
        + " optimization { priority: PRIORITY_MAX }"
    )
    runtime = _runtime()
    _load(tmp_path, cfg, runtime)
    settings = runtime.loaded[0].executors[0].settings
    assert (settings.allocation_strategy, settings.priority) == ("ON_PROFILE_CHANGE", "MAX")


def test_an_unknown_allocation_strategy_gets_tritons_message(tmp_path: Path) -> None:
    cfg = gpu_config(
        BATCH_CONFIG
        + 'parameters { key: "execution_context_allocation_strategy" value { string_value: "static" } }'
    )
    with pytest.raises(ModelConfigError) as e:
        _load(tmp_path, cfg, _runtime())
    assert str(e.value) == (
        "Invalid value for 'execution_context_allocation_strategy': 'static' for model instance 'trt'. "
        "Supported values are 'STATIC' and 'ON_PROFILE_CHANGE'."
    )


def test_multi_device_is_refused(tmp_path: Path) -> None:
    cfg = gpu_config(
        BATCH_CONFIG + 'parameters { key: "enable_multi_device" value { string_value: "true" } }'
    )
    with pytest.raises(ModelConfigError, match=r"TensorRT Multi-Device .* is not supported by modelhost"):
        _load(tmp_path, cfg, _runtime())


def test_fields_modelhost_ignores_are_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = gpu_config(BATCH_CONFIG + "optimization { cuda { graphs: true } eager_batching: true }")
    with caplog.at_level(logging.INFO, logger="modelhost.backends.tensorrt.settings"):
        _load(tmp_path, cfg, _runtime(), backend_config={"coalesce-request-input": "true"})
    assert (
        "--backend-config tensorrt,coalesce-request-input, optimization.cuda.graphs, optimization.eager_batching "
        "accepted and ignored" in caplog.text
    )


# -- the config against the engine ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config_text", "message"),
    [
        (
            'max_batch_size: 8 input { name: "z" data_type: TYPE_FP32 dims: [3] } '
            'output { name: "y" data_type: TYPE_FP32 dims: [2] }',
            "configuration expects input 'z' but the model has only ['x']",
        ),
        (
            'max_batch_size: 8 input { name: "x" data_type: TYPE_FP16 dims: [3] } '
            'output { name: "y" data_type: TYPE_FP32 dims: [2] }',
            "configuration expects datatype TYPE_FP16 for input 'x', model provides TYPE_FP32",
        ),
        (
            'max_batch_size: 8 input { name: "x" data_type: TYPE_FP32 dims: [4] } '
            'output { name: "y" data_type: TYPE_FP32 dims: [2] }',
            "tensor 'x': the model expects 2 dimensions (shape [-1,3]) but the model configuration specifies 2 "
            "dimensions (an initial batch dimension",
        ),
        (
            'max_batch_size: 0 input { name: "x" data_type: TYPE_FP32 dims: [3] } '
            'output { name: "y" data_type: TYPE_FP32 dims: [2] }',
            "tensor 'x': the model expects 2 dimensions (shape [-1,3]) but the model configuration specifies 1 "
            "dimensions (shape [3])",
        ),
        (
            'max_batch_size: 8 output { name: "y" data_type: TYPE_FP32 dims: [2] }',
            "model input(s) ['x'] are missing from the configuration",
        ),
        (
            'max_batch_size: 8 input { name: "x" data_type: TYPE_FP32 dims: [3] } '
            'input { name: "w" data_type: TYPE_FP32 dims: [3] } output { name: "y" data_type: TYPE_FP32 dims: [2] }',
            "configuration expects 2 inputs, model provides at most 1",
        ),
        (
            'max_batch_size: 8 input { name: "x" data_type: TYPE_FP32 dims: [3] is_shape_tensor: true } '
            'output { name: "y" data_type: TYPE_FP32 dims: [2] }',
            "input 'x' for model 'trt' is incorrectly marked as a shape tensor in the model configuration.",
        ),
    ],
)
def test_a_config_the_engine_contradicts_is_refused(tmp_path: Path, config_text: str, message: str) -> None:
    with pytest.raises(ModelConfigError) as e:
        _load(tmp_path, gpu_config(config_text), _runtime())
    assert message in str(e.value)


def test_a_static_engine_with_a_fixed_batch_dimension_serves_a_batching_config(tmp_path: Path) -> None:
    # The config's batch dimension is a wildcard against the engine's fixed 8 (Triton's rule): it loads, a batch of
    # 8 runs, and another batch size is a 400 naming the engine's range.
    description = engine(static_input("x", (8, 3)), output("y", (8, 2)))
    instance = _load(tmp_path, gpu_config(BATCH_CONFIG), _runtime(description))
    assert isinstance(instance, TensorRTInstance)
    assert instance.execute({"x": np.ones((8, 3), np.float32)}, ["y"])["y"].shape == (8, 2)
    with pytest.raises(BackendInvalidArgument, match="between 8 and 8 but received 3"):
        instance.execute({"x": np.ones((3, 3), np.float32)}, ["y"])


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (EngineTensor("s", True, "INT32", (2,), is_shape_tensor=True), "engine input 's' is a shape tensor"),
        (
            EngineTensor("f", False, "HALF", (-1, 4), linear_format=False),
            "engine output 'f' uses a non-linear IO format",
        ),
        (EngineTensor("q", False, "FP8", (-1, 4)), "engine output 'q' has TensorRT datatype FP8"),
    ],
)
def test_engines_modelhost_cannot_serve_are_refused_clearly(
    tmp_path: Path, tensor: EngineTensor, message: str
) -> None:
    description = engine(*batch_engine().tensors, tensor)
    with pytest.raises(ModelConfigError, match=message):
        _load(tmp_path, gpu_config(BATCH_CONFIG), _runtime(description))


def test_config_dims_outside_the_profile_are_refused(tmp_path: Path) -> None:
    description = engine(dynamic_input("x", (-1, -1), ((1, 2), (4, 8), (8, 16))), output("y", (-1, 2)))
    cfg = gpu_config(
        'max_batch_size: 8 input { name: "x" data_type: TYPE_FP32 dims: [32] } '
        'output { name: "y" data_type: TYPE_FP32 dims: [2] }'
    )
    with pytest.raises(ModelConfigError) as e:
        _load(tmp_path, cfg, _runtime(description))
    assert str(e.value) == (
        "model configuration specified invalid shape for input 'x' for model trt. Error details: model expected "
        "the shape of dimension 1 to be between 2 and 16 but received 32"
    )


def test_a_max_batch_size_over_the_profiles_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = gpu_config(BATCH_CONFIG.replace("max_batch_size: 8", "max_batch_size: 16"))
    with caplog.at_level(logging.WARNING):
        _load(tmp_path, cfg, _runtime(batch_engine(max_batch=8)))
    assert "max_batch_size 16 exceeds the largest batch (8) of optimization profile 0" in caplog.text


# -- profiles and shared engines -----------------------------------------------------------------------------


def test_an_instance_gets_the_profiles_of_its_group(tmp_path: Path) -> None:
    runtime = _runtime(batch_engine(num_profiles=3))
    cfg = gpu_config(BATCH_CONFIG)
    cfg.instance_group[0].profile.extend(["2", "0"])
    _load(tmp_path, cfg, runtime)
    assert runtime.loaded[0].executors[0].profiles == [2, 0]


def test_a_profile_the_engine_lacks_fails_the_load(tmp_path: Path) -> None:
    cfg = gpu_config(BATCH_CONFIG)
    cfg.instance_group[0].profile.append("3")
    with pytest.raises(ModelConfigError) as e:
        _load(tmp_path, cfg, _runtime(batch_engine(num_profiles=2)))
    assert str(e.value) == (
        "Can not set the specified optimization profile 3[3] for trt_0. Expected optimization profile index range 0-1"
    )


def test_instances_share_a_static_engine_and_not_a_dynamic_one(tmp_path: Path) -> None:
    static = engine(static_input("x", (8, 3)), output("y", (8, 2)))
    runtime, cache = _runtime(static), EngineCache()
    first = _load(tmp_path, gpu_config(BATCH_CONFIG), runtime, index=0, cache=cache)
    second = _load(tmp_path, gpu_config(BATCH_CONFIG), runtime, index=1, cache=cache)
    assert len(runtime.deserialized) == 1 and len(runtime.loaded[0].executors) == 2
    assert (first.name, second.name) == ("trt_0", "trt_1")  # type: ignore[attr-defined]

    runtime, cache = _runtime(), EngineCache()
    _load(tmp_path, gpu_config(BATCH_CONFIG), runtime, index=0, cache=cache)
    _load(tmp_path, gpu_config(BATCH_CONFIG), runtime, index=1, cache=cache)
    assert len(runtime.deserialized) == 2


def test_the_gpu_load_limit_is_checked_after_the_instance_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpu_memory, "read_gpu_memory", lambda device_id: GpuUsage(used=90, total=100))
    runtime = _runtime()
    with pytest.raises(Unavailable, match="memory limit set for GPU 0 has exceeded"):
        _load(tmp_path, gpu_config(BATCH_CONFIG), runtime, gpu_memory=GpuMemory(load_limits={0: 0.5}))
    assert runtime.loaded[0].executors[0].closed
