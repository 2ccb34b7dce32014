from __future__ import annotations

import pytest
from google.protobuf import text_format  # type: ignore[import-untyped]
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.config.normalize import normalize_config
from modelhost.config.validate import FIELDS_NOT_SUPPORTED, validate_config
from modelhost.errors import ModelConfigError

GOOD_IO = """
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def _check(text: str, *, gpu_count: int = 0, name: str = "m", normalize: bool = True) -> None:
    config = text_format.Parse(text, ModelConfig())
    if normalize:
        normalize_config(config, name, gpu_count=gpu_count)
    validate_config(config, name, "/repo/m/config.pbtxt", gpu_count)


def test_valid_config_passes() -> None:
    _check(
        'backend: "onnxruntime" platform: "onnxruntime_onnx" max_batch_size: 8 dynamic_batching {}' + GOOD_IO
    )


def _fails(text: str, pattern: str, **kwargs: object) -> str:
    with pytest.raises(ModelConfigError, match=pattern) as info:
        _check(text, **kwargs)  # type: ignore[arg-type]
    message = str(info.value)
    assert "/repo/m/config.pbtxt" in message
    return message


def test_name_mismatch() -> None:
    _fails(
        'name: "other" backend: "python"' + GOOD_IO,
        "unexpected directory name 'm' for model 'other', directory name must equal model name",
    )


def test_the_name_is_checked_after_the_other_rules() -> None:
    # Triton's repository manager compares the name with the folder once the config is valid: a broken config
    # in a misnamed folder is reported for what is broken (L0_model_config's ensemble_scheduling_no_set).
    _fails(
        'name: "other" platform: "ensemble"' + GOOD_IO,
        "ensemble scheduling must be set for ensemble other whose platform is ensemble",
    )


def test_an_unknown_gpu_id_in_tritons_words() -> None:
    _fails(
        'backend: "python" instance_group [ { kind: KIND_GPU gpus: [ 42 ] } ]' + GOOD_IO,
        r"instance group m_0 of model m specifies invalid or unsupported gpu id 42\. GPUs with at least the "
        r"minimum required CUDA compute compatibility of 6\.000000 are: 0 1",
        gpu_count=2,
    )


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("max_batch_size: 2", r"must specify 'platform' or 'backend' for 'm'"),
        ('platform: "caffe2"', r"unexpected platform type 'caffe2' for m"),
        ('platform: "ensemble" backend: "python"', r"Ensemble model 'm' must have platform type 'ensemble'"),
        ('platform: "pytorch_libtorch" backend: "onnxruntime"', r"unexpected 'platform' and 'backend' pair"),
        (
            'platform: "onnxruntime_onnx" backend: "python"',
            r"python backend, which must not specify a 'platform'",
        ),
        ('backend: "python" max_batch_size: -1', r"'max_batch_size' must be non-negative value for m"),
        ('backend: "python" version_policy { specific {} }', r"at least one version must be available"),
        ('backend: "python" version_policy { latest { num_versions: 0 } }', r"at least one version"),
    ],
)
def test_core_rules(text: str, pattern: str) -> None:
    _fails(text + GOOD_IO, pattern)


def test_every_field_is_acted_on() -> None:
    # A field modelhost did not act on would be listed, and fail the load; none is left.
    assert FIELDS_NOT_SUPPORTED == {}


def test_op_libraries_for_a_backend_that_does_not_load_them_fail_the_load() -> None:
    message = _fails(
        'backend: "python" model_operations { op_library_filename: "libcustom.so" }' + GOOD_IO,
        "is honoured by the onnxruntime backend only",
    )
    assert "not by 'python' (model 'm')" in message
    _check(
        'platform: "onnxruntime_onnx" backend: "onnxruntime" model_operations { op_library_filename: "libcustom.so" }'
        + GOOD_IO
    )


def test_empty_unsupported_fields_are_harmless() -> None:
    _check(
        'backend: "python" model_operations {} model_repository_agents {} '
        "sequence_batching { iterative_sequence: false oldest { preserve_ordering: false } }" + GOOD_IO
    )


@pytest.mark.parametrize(
    ("io", "pattern"),
    [
        ("input [ { data_type: TYPE_FP32 dims: [1] } ]", r"model input must specify 'name' for m"),
        ('input [ { name: "A" dims: [1] } ]', r"model input 'A' must specify 'data_type' for m"),
        ('output [ { name: "A" data_type: TYPE_FP32 } ]', r"model output 'A' must specify 'dims' for m"),
        (
            'input [ { name: "A" data_type: TYPE_FP32 dims: [0] } ]',
            r"'A' dimension must be integer >= 1, or -1",
        ),
        ('input [ { name: "A" data_type: TYPE_FP32 dims: [-2] } ]', r"'A' dimension must be integer >= 1"),
        (
            'input [ { name: "A" data_type: TYPE_FP32 dims: [4] },'
            ' { name: "A" data_type: TYPE_INT8 dims: [4] } ]',
            r"model input 'A' is specified more than once for m",
        ),
        (
            'output [ { name: "A" data_type: TYPE_FP32 dims: [2, 3] reshape { shape: [5] } } ]',
            r"model output 'A' has different size for dims and reshape for m",
        ),
        (
            'input [ { name: "A" data_type: TYPE_FP32 dims: [2, -1] reshape { shape: [-1, 2, -1] } } ]',
            r"different number of variable-size dimensions",
        ),
        (
            'input [ { name: "A" data_type: TYPE_FP32 dims: [1] reshape { shape: [] } } ]',
            r"cannot have empty reshape for non-batching model",
        ),
        (
            'input [ { name: "A" data_type: TYPE_FP32 dims: [2] reshape { shape: [0] } } ]',
            r"reshape dimensions must be integer >= 1",
        ),
        (
            'input [ { name: "A" data_type: TYPE_FP32 dims: [2] format: FORMAT_NCHW } ]',
            r"model input NHWC/NCHW require 3 dims for m",
        ),
        (
            'input [ { name: "A" data_type: TYPE_FP32 dims: [2] is_shape_tensor: true } ]',
            r"shape tensors are only supported for TensorRT platform for m",
        ),
    ],
)
def test_io_rules(io: str, pattern: str) -> None:
    _fails('backend: "python"' + io, pattern)


@pytest.mark.parametrize(
    "io",
    [
        'input [ { name: "A" data_type: TYPE_FP32 dims: [-1, 6] reshape { shape: [-1, 2, 3] } } ]',
        'input [ { name: "A" data_type: TYPE_FP32 dims: [2, 4, -1, 6] reshape { shape: [8, -1, 1, 6] } } ]',
        'input [ { name: "A" data_type: TYPE_FP32 dims: [1] reshape { shape: [] } } ] max_batch_size: 2',
        # An input and an output may share a name.
        'input [ { name: "A" data_type: TYPE_FP32 dims: [-1] } ]'
        ' output [ { name: "A" data_type: TYPE_FP32 dims: [1] } ]',
    ],
)
def test_valid_io(io: str) -> None:
    _check('backend: "python"' + io)


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        (
            "max_batch_size: 4 dynamic_batching { preferred_batch_size: [8] }",
            r"preferred size must be <= max batch",
        ),
        (
            "max_batch_size: 4 dynamic_batching { preferred_batch_size: [0] }",
            r"preferred size must be positive",
        ),
        ("dynamic_batching { preferred_batch_size: [2] }", r"preferred size must be <= max batch size for m"),
        (
            "max_batch_size: 4 dynamic_batching { priority_levels: 2 }",
            r"default priority level must be in range",
        ),
        (
            "max_batch_size: 4 dynamic_batching { priority_levels: 2 default_priority_level: 1 "
            "priority_queue_policy { key: 3 value: {} } }",
            r"priority queue policy must have priority level in range \[1, 2\]",
        ),
        (
            "max_batch_size: 4 dynamic_batching { preserve_ordering: true default_queue_policy "
            "{ timeout_action: DELAY default_timeout_microseconds: 5 } }",
            r"can not have DELAY as timeout action",
        ),
        (
            "max_batch_size: 4 sequence_batching { oldest { preferred_batch_size: [5] } }",
            r"must be <= max batch",
        ),
        (
            "sequence_batching {} response_cache { enable: true }",
            r"Response Cache does not currently support",
        ),
        (
            'sequence_batching { control_input [ { name: "S"'
            " control [ { kind: CONTROL_SEQUENCE_START } ] } ] }",
            r"must specify either 'int32_false_true'",
        ),
        (
            'sequence_batching { control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START '
            "int32_false_true: [0, 1, 2] } ] } ] }",
            r"'int32_false_true' must have exactly 2 entries",
        ),
        (
            'sequence_batching { control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID '
            "data_type: TYPE_FP32 } ] } ] }",
            r"unexpected data type for control CONTROL_SEQUENCE_CORRID",
        ),
    ],
)
def test_scheduler_rules(text: str, pattern: str) -> None:
    _fails('backend: "python" ' + text + GOOD_IO, pattern)


def test_valid_sequence_batching() -> None:
    _check(
        'backend: "python" max_batch_size: 2 sequence_batching { control_input [ '
        '{ name: "S" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] }, '
        '{ name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] } ] }' + GOOD_IO
    )


def test_kind_gpu_without_gpus_says_none_available() -> None:
    message = _fails(
        'backend: "python" instance_group [ { kind: KIND_GPU } ]' + GOOD_IO,
        r"instance group m_0 of model m has kind KIND_GPU but no GPUs are available",
    )
    assert "KIND_CPU" in message


def test_gpu_id_out_of_range() -> None:
    _fails(
        'backend: "python" instance_group [ { kind: KIND_GPU gpus: [3] } ]' + GOOD_IO,
        r"instance group m_0 of model m specifies invalid or unsupported gpu id 3",
        gpu_count=2,
    )


def test_kind_cpu_with_gpus() -> None:
    _fails(
        'backend: "python" instance_group [ { kind: KIND_CPU gpus: [0] } ]' + GOOD_IO,
        r"has kind KIND_CPU but specifies one or more GPUs",
        gpu_count=1,
    )


def test_profile_only_for_tensorrt() -> None:
    _fails(
        'backend: "python" instance_group [ { kind: KIND_CPU profile: ["0"] } ]' + GOOD_IO,
        r"specifies profile field which is only supported for TensorRT models",
    )


def test_unnormalized_config_without_instance_group() -> None:
    _fails(
        'name: "m" backend: "python" version_policy { all {} }' + GOOD_IO,
        "one or more 'instance group's",
        normalize=False,
    )


ENSEMBLE = """
platform: "ensemble"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "a" input_map { key: "X" value: "IN" } output_map { key: "Y" value: "MID" } },
  { model_name: "b" input_map { key: "X" value: "MID" } output_map { key: "Y" value: "OUT" } }
] }
"""


def test_valid_ensemble() -> None:
    _check(ENSEMBLE)


@pytest.mark.parametrize(
    ("extra", "pattern"),
    [
        ("instance_group [ { kind: KIND_CPU } ]", r"instance group should not be specified for ensemble 'm'"),
        ("optimization { priority: PRIORITY_MAX }", r"optimization should not be specified for ensemble 'm'"),
        (
            'model_warmup [ { name: "w" batch_size: 1 } ]',
            r"model_warmup can not be specified for ensemble 'm'",
        ),
        ('output [ { name: "GHOST" data_type: TYPE_FP32 dims: [ 4 ] } ]', r"ensemble output 'GHOST'"),
    ],
)
def test_ensemble_rules(extra: str, pattern: str) -> None:
    _fails(ENSEMBLE + extra, pattern)


def test_ensemble_unconnected_output() -> None:
    text = ENSEMBLE.replace('input_map { key: "X" value: "MID" }', 'input_map { key: "X" value: "OTHER" }')
    assert text != ENSEMBLE
    _fails(text, r"output 'OUT' for ensemble 'm' is not written")


def test_ensemble_unused_tensor() -> None:
    text = ENSEMBLE.replace(
        'output_map { key: "Y" value: "MID" }',
        'output_map { key: "Y" value: "MID" } output_map { key: "Z" value: "SPARE" }',
    )
    assert text != ENSEMBLE
    _fails(text, r"ensemble tensor 'SPARE' is unused in ensemble 'm'")


def test_ensemble_platform_without_scheduling() -> None:
    _fails(
        'platform: "ensemble"' + GOOD_IO, r"ensemble scheduling must be set for ensemble m whose platform is"
    )


def test_ensemble_scheduling_on_other_platform() -> None:
    _fails(
        'backend: "python" ensemble_scheduling { step [ { model_name: "a" } ] }' + GOOD_IO,
        r"ensemble scheduling cannot be set for model 'm' whose platform is not ensemble",
    )


def test_decoupled_with_response_cache() -> None:
    _fails(
        'backend: "python" model_transaction_policy { decoupled: true } response_cache { enable: true }'
        + GOOD_IO,
        r"with 'decoupled' transaction policy",
    )
