"""The package's public names are exactly those of the single module pb_utils was before it became a package
(each a name a model.py may use as `pb_utils.<name>`), with Triton's values."""

from __future__ import annotations

from types import ModuleType

from modelhost.backends.python import pb_utils

# What pb_utils.py defined, public, before the split (its imports, numpy and typing names, were never the API).
NAMES = {
    "COUNTER",
    "GAUGE",
    "HISTOGRAM",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "InferenceTrace",
    "Logger",
    "MemoryType",
    "Metric",
    "MetricFamily",
    "MetricKind",
    "ModelConfig",
    "PreferredMemory",
    "ResponseIterator",
    "Runtime",
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_model_dir",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "load_model",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
}


def test_the_package_exports_exactly_the_modules_names() -> None:
    assert set(pb_utils.__all__) == NAMES
    # Besides its submodules (and `annotations`), nothing public that a model could come to depend on.
    public = {
        name
        for name, value in vars(pb_utils).items()
        if not name.startswith("_") and not isinstance(value, ModuleType) and name != "annotations"
    }
    assert public == NAMES


def test_from_import_star_gives_the_names() -> None:
    namespace: dict[str, object] = {}
    exec("from modelhost.backends.python.pb_utils import *", namespace)
    assert {name for name in namespace if name != "__builtins__"} == NAMES


def test_constants_have_tritons_values() -> None:
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START == 1
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END == 2
    assert pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL == 1
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE == 2
    # pb_utils' memory types are Triton's PreferredMemory::MemoryType (GPU first), not core's.
    assert pb_utils.TRITONSERVER_MEMORY_GPU == 0
    assert pb_utils.TRITONSERVER_MEMORY_CPU == 1
    assert pb_utils.TritonError.INTERNAL == 1
    assert pb_utils.TritonError.CANCELLED == 7
    assert [pb_utils.MetricFamily.COUNTER, pb_utils.MetricFamily.GAUGE, pb_utils.MetricFamily.HISTOGRAM] == [
        0,
        1,
        2,
    ]
