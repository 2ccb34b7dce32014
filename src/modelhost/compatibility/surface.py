"""Triton Inference Server's surface, item by item, with what modelhost does with each.

Where the code can say it, it does: the backends come from the backend registry, the flags from the CLI's table,
the protocol extensions from the server's list, the metric families from the metrics code and the unsupported
config fields from the config checks. The rest is stated here, each with how it is checked:
tests/e2e/test_compatibility.py probes every HTTP endpoint and gRPC method of a running server, compares the flags,
extensions, metric families and python backend names with the code, and checks that each hand-stated item
names a test that exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class State(StrEnum):
    SUPPORTED = "supported"
    PARTLY = "partly"
    # Code and tests that need a GPU, which no GPU machine has run yet (scripts/gpu_check.sh runs them); on a host
    # without a GPU the item answers as its note says.
    UNVERIFIED = "written, not yet run on a GPU"
    NOT_YET = "not yet"
    NOT_PLANNED = "not planned"


@dataclass(frozen=True)
class Item:
    name: str
    state: State
    note: str = ""
    doc: str = ""  # a page under docs/, linked from the row
    # What pins the state: a flag whose status must agree (refused <-> not yet), or a test ("path::name").
    flag: str = ""
    test: str = ""


@dataclass(frozen=True)
class Probe:
    """A request that shows an endpoint's state on a running server: the status it must answer."""

    method: str
    path: str
    status: int
    body: Any = None
    port: str = "http"  # or "metrics"


@dataclass(frozen=True)
class Endpoint(Item):
    probes: tuple[Probe, ...] = field(default=())


# --- Backends ------------------------------------------------------------------------------------------------

# Triton's backends: name -> (what it serves, platform values). Whether modelhost serves one is read from the
# backend registry; the notes and the states of those it does not serve are here.
TRITON_BACKENDS: dict[str, tuple[str, str]] = {
    "onnxruntime": ("ONNX Runtime", "onnxruntime_onnx"),
    "python": ("Python (`model.py`)", ""),
    "pytorch": ("PyTorch: TorchScript, AOTInductor", "pytorch_libtorch, torch_aoti"),
    "tensorrt": ("TensorRT plans", "tensorrt_plan"),
    "tensorflow": ("TensorFlow: SavedModel, GraphDef", "tensorflow_savedmodel, tensorflow_graphdef"),
    "openvino": ("OpenVINO", ""),
    "fil": ("FIL: XGBoost, LightGBM, Treelite tree models", ""),
    "dali": ("DALI pipelines", ""),
    "vllm": ("vLLM", ""),
    "tensorrtllm": ("TensorRT-LLM", ""),
    "identity, repeat, square": ("Triton's test backends", ""),
    "python-based backends": ('`<--backend-directory>/<name>/model.py`, named by `backend: "<name>"`', ""),
    "custom C++ backends": ("`libtriton_<name>.so` from `--backend-directory`", ""),
}

BACKEND_NOTES: dict[str, Item] = {
    "onnxruntime": Item("onnxruntime", State.SUPPORTED, "built in", "configuration.md"),
    "python": Item("python", State.SUPPORTED, "built in; the API below", "python-backend.md"),
    "pytorch": Item("pytorch", State.SUPPORTED, "extra `torch`", "backends/pytorch.md"),
    "tensorrt": Item(
        "tensorrt",
        State.PARTLY,
        "extra `tensorrt`; config, auto-complete and profiles are tested on CPU with stand-in engines, the GPU "
        "execution has not run on a GPU yet",
        "backends/tensorrt.md",
    ),
    "tensorflow": Item(
        "tensorflow", State.SUPPORTED, "extra `tensorflow` (TensorFlow 2)", "backends/tensorflow.md"
    ),
    "openvino": Item("openvino", State.SUPPORTED, "extra `openvino`", "backends/openvino.md"),
    "fil": Item(
        "fil",
        State.SUPPORTED,
        "extra `fil`; on CPU through XGBoost, LightGBM and Treelite",
        "backends/fil.md",
    ),
    "dali": Item("dali", State.NOT_YET, "a model of backend `dali` is UNAVAILABLE with the reason"),
    "vllm": Item("vllm", State.NOT_YET, "LLM serving; the python backend can host a vLLM engine meanwhile"),
    "tensorrtllm": Item("tensorrtllm", State.NOT_YET, "needs the TensorRT-LLM runtime on a GPU"),
    "identity, repeat, square": Item(
        "identity, repeat, square",
        State.NOT_PLANNED,
        "Triton's own test backends; a python model does the same",
    ),
    "python-based backends": Item(
        "python-based backends",
        State.SUPPORTED,
        "served by the python backend, auto-complete included; `--backend-config=<name>,...` applies",
        "python-backend.md",
        flag="backend-directory",
        test="tests/e2e/test_python_based_backend.py::test_a_model_of_a_python_based_backend_is_served",
    ),
    "custom C++ backends": Item(
        "custom C++ backends",
        State.NOT_PLANNED,
        "modelhost's backends are Python classes (`modelhost.backends.registry.register`); "
        "`--backend-directory` serves python-based backends only",
        "backends.md",
    ),
}


# --- HTTP/REST -----------------------------------------------------------------------------------------------

_TENSORS = [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
]
_GENERATE = {"INPUT0": list(range(16)), "INPUT1": [1] * 16}

# Probed in this order on a server in explicit mode with `simple` and `simple_string` loaded and client shared
# memory allowed (tests/e2e/test_compatibility.py).
HTTP_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        "GET /v2/health/live",
        State.SUPPORTED,
        "",
        "protocols.md",
        probes=(Probe("GET", "/v2/health/live", 200),),
    ),
    Endpoint(
        "GET /v2/health/ready",
        State.SUPPORTED,
        "",
        "protocols.md",
        probes=(Probe("GET", "/v2/health/ready", 200),),
    ),
    Endpoint(
        "GET /v2", State.SUPPORTED, "server metadata", "protocols.md", probes=(Probe("GET", "/v2", 200),)
    ),
    Endpoint(
        "GET /v2/models/{m}[/versions/{v}]",
        State.SUPPORTED,
        "model metadata",
        "protocols.md",
        probes=(Probe("GET", "/v2/models/simple", 200), Probe("GET", "/v2/models/simple/versions/1", 200)),
    ),
    Endpoint(
        "GET /v2/models/{m}[/versions/{v}]/ready",
        State.SUPPORTED,
        "",
        "protocols.md",
        probes=(Probe("GET", "/v2/models/simple/ready", 200),),
    ),
    Endpoint(
        "GET /v2/models/{m}[/versions/{v}]/config",
        State.SUPPORTED,
        "",
        "configuration.md",
        probes=(Probe("GET", "/v2/models/simple/config", 200),),
    ),
    Endpoint(
        "POST /v2/models/{m}[/versions/{v}]/infer",
        State.SUPPORTED,
        "JSON, binary tensor data, raw binary; gzip/deflate",
        "protocols.md",
        probes=(Probe("POST", "/v2/models/simple/infer", 200, {"inputs": _TENSORS}),),
    ),
    Endpoint(
        "POST /v2/models/{m}[/versions/{v}]/generate",
        State.SUPPORTED,
        "",
        "protocols.md",
        probes=(Probe("POST", "/v2/models/simple/generate", 200, _GENERATE),),
    ),
    Endpoint(
        "POST /v2/models/{m}[/versions/{v}]/generate_stream",
        State.SUPPORTED,
        "server-sent events",
        "protocols.md",
        probes=(Probe("POST", "/v2/models/simple/generate_stream", 200, _GENERATE),),
    ),
    Endpoint(
        "GET /v2/models/stats, GET /v2/models/{m}[/versions/{v}]/stats",
        State.SUPPORTED,
        "",
        "protocols.md",
        probes=(Probe("GET", "/v2/models/stats", 200), Probe("GET", "/v2/models/simple/stats", 200)),
    ),
    Endpoint(
        "POST /v2/repository/index",
        State.SUPPORTED,
        "",
        "model-management.md",
        probes=(Probe("POST", "/v2/repository/index", 200, {}),),
    ),
    Endpoint(
        "POST /v2/repository/models/{m}/load",
        State.SUPPORTED,
        "with `config` and `file:` parameters",
        "model-management.md",
        probes=(Probe("POST", "/v2/repository/models/simple_string/load", 200, {}),),
    ),
    Endpoint(
        "POST /v2/repository/models/{m}/unload",
        State.SUPPORTED,
        "with `unload_dependents`",
        "model-management.md",
        probes=(Probe("POST", "/v2/repository/models/simple_string/unload", 200, {}),),
    ),
    Endpoint(
        "POST /v2/repository/{r}/...",
        State.SUPPORTED,
        "501, as in Triton: named repositories are refused by both",
        "protocols.md",
        probes=(Probe("POST", "/v2/repository/other/index", 501, {}),),
    ),
    Endpoint(
        "GET /v2/systemsharedmemory[/region/{r}]/status",
        State.SUPPORTED,
        "",
        "shared-memory.md",
        probes=(Probe("GET", "/v2/systemsharedmemory/status", 200),),
    ),
    Endpoint(
        "POST /v2/systemsharedmemory/region/{r}/register",
        State.SUPPORTED,
        "with `--allow-client-shm=true` (off by default, as in Triton)",
        "shared-memory.md",
        probes=(
            Probe(
                "POST",
                "/v2/systemsharedmemory/region/r/register",
                400,
                {"key": "/modelhost_compat_no_such_region", "offset": 0, "byte_size": 64},
            ),
        ),
    ),
    Endpoint(
        "POST /v2/systemsharedmemory[/region/{r}]/unregister",
        State.SUPPORTED,
        "",
        "shared-memory.md",
        probes=(Probe("POST", "/v2/systemsharedmemory/unregister", 200, {}),),
    ),
    Endpoint(
        "GET /v2/cudasharedmemory[/region/{r}]/status",
        State.SUPPORTED,
        "",
        "shared-memory.md",
        probes=(Probe("GET", "/v2/cudasharedmemory/status", 200),),
    ),
    Endpoint(
        "POST /v2/cudasharedmemory/region/{r}/register",
        State.UNVERIFIED,
        "opens the client's CUDA IPC handle with cuda-bindings; without a GPU: 501 with the reason",
        "shared-memory.md",
        probes=(
            Probe(
                "POST",
                "/v2/cudasharedmemory/region/c/register",
                501,
                {"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 64},
            ),
        ),
    ),
    Endpoint(
        "POST /v2/cudasharedmemory[/region/{r}]/unregister",
        State.SUPPORTED,
        "",
        "shared-memory.md",
        probes=(Probe("POST", "/v2/cudasharedmemory/unregister", 200, {}),),
    ),
    Endpoint(
        "GET/POST /v2/trace/setting, GET/POST /v2/models/{m}/trace/setting",
        State.SUPPORTED,
        "",
        "tracing.md",
        probes=(
            Probe("GET", "/v2/trace/setting", 200),
            Probe("POST", "/v2/trace/setting", 200, {}),
            Probe("GET", "/v2/models/simple/trace/setting", 200),
        ),
    ),
    Endpoint(
        "GET/POST /v2/logging",
        State.SUPPORTED,
        "",
        "protocols.md",
        probes=(Probe("GET", "/v2/logging", 200), Probe("POST", "/v2/logging", 200, {})),
    ),
    Endpoint(
        "GET /metrics (metrics port)",
        State.SUPPORTED,
        "",
        "metrics.md",
        probes=(Probe("GET", "/metrics", 200, port="metrics"),),
    ),
)


# --- gRPC ----------------------------------------------------------------------------------------------------

# Methods of inference.GRPCInferenceService (read from tritonclient's service descriptor) that are not fully
# served; every other method is. A probe of a supported method must not answer UNIMPLEMENTED; these must.
GRPC_NOT_SERVED: dict[str, Item] = {
    "CudaSharedMemoryRegister": Item(
        "CudaSharedMemoryRegister",
        State.UNVERIFIED,
        "without a GPU: UNIMPLEMENTED with the reason",
        "shared-memory.md",
    ),
}
GRPC_HEALTH: tuple[Item, ...] = (
    Item(
        "grpc.health.v1.Health/Check",
        State.SUPPORTED,
        "SERVING while ready (Kubernetes gRPC probes)",
        "grpc.md",
    ),
    Item(
        "grpc.health.v1.Health/Watch",
        State.SUPPORTED,
        "the status at once and on each change; NOT_SERVING and the end of the stream at shutdown",
        "grpc.md",
        test="tests/e2e/test_grpc_health_watch.py::test_watch_follows_readiness_and_ends_when_the_server_stops",
    ),
)


# --- Protocol extensions ---------------------------------------------------------------------------------------

# Triton's server extensions, in its order. Those in modelhost's list (modelhost.engine.engine.EXTENSIONS) are served;
# system_shared_memory is listed when --allow-client-shm=true, as its endpoints then work.
TRITON_EXTENSIONS: tuple[str, ...] = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
)
EXTENSION_NOTES: dict[str, Item] = {
    "system_shared_memory": Item(
        "system_shared_memory", State.SUPPORTED, "listed with `--allow-client-shm=true`", "shared-memory.md"
    ),
    "cuda_shared_memory": Item(
        "cuda_shared_memory",
        State.UNVERIFIED,
        "listed with `--allow-client-shm=true` on a host with a GPU and the `cuda` extra",
        "shared-memory.md",
    ),
}


# --- Metrics ---------------------------------------------------------------------------------------------------

# Triton's Prometheus families (core metrics.cc and the local cache). Those modelhost exports are read from
# modelhost.frontends.metrics.family_names; the others are here.
TRITON_METRIC_FAMILIES: tuple[str, ...] = (
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
    "nv_inference_pending_request_count",
    "nv_model_load_duration_secs",
    "nv_inference_first_response_histogram_ms",
    "nv_inference_request_summary_us",
    "nv_inference_queue_summary_us",
    "nv_inference_compute_input_summary_us",
    "nv_inference_compute_infer_summary_us",
    "nv_inference_compute_output_summary_us",
    "nv_cache_num_hits_per_model",
    "nv_cache_num_misses_per_model",
    "nv_cache_hit_duration_per_model",
    "nv_cache_miss_duration_per_model",
    "nv_cache_hit_summary_per_model",
    "nv_cache_miss_summary_per_model",
    "nv_cache_util",
    "nv_cache_num_entries",
    "nv_cache_num_lookups",
    "nv_cache_num_hits",
    "nv_cache_num_misses",
    "nv_cache_num_evictions",
    "nv_cache_lookup_duration",
    "nv_cache_insertion_duration",
    "nv_cpu_utilization",
    "nv_cpu_memory_total_bytes",
    "nv_cpu_memory_used_bytes",
    "nv_gpu_utilization",
    "nv_gpu_memory_total_bytes",
    "nv_gpu_memory_used_bytes",
    "nv_gpu_power_usage",
    "nv_gpu_power_limit",
    "nv_energy_consumption",
    "nv_pinned_memory_pool_total_bytes",
    "nv_pinned_memory_pool_used_bytes",
)
_GPU_METRIC = "on a GPU host with the `gpu-metrics` extra (NVML)"
METRIC_NOTES: dict[str, Item] = {
    **{
        name: Item(name, State.UNVERIFIED, _GPU_METRIC, "metrics.md")
        for name in (
            "nv_gpu_utilization",
            "nv_gpu_memory_total_bytes",
            "nv_gpu_memory_used_bytes",
            "nv_gpu_power_usage",
            "nv_gpu_power_limit",
            "nv_energy_consumption",
        )
    },
    "nv_pinned_memory_pool_total_bytes": Item(
        "nv_pinned_memory_pool_total_bytes",
        State.NOT_PLANNED,
        "no pinned memory pool: tensors go to the runtimes from the request buffers",
    ),
    "nv_pinned_memory_pool_used_bytes": Item(
        "nv_pinned_memory_pool_used_bytes", State.NOT_PLANNED, "as above"
    ),
}
# Exported under a condition, said in the row.
METRIC_CONDITIONS: dict[str, str] = {
    "nv_inference_first_response_histogram_ms": "`--metrics-config histogram_latencies=true`",
    "summary": "`--metrics-config summary_latencies=true`",
    "_per_model": "for models with `response_cache { enable: true }`",
    "nv_cache_": "with `--cache-config`",
}


# --- Python backend API ----------------------------------------------------------------------------------------

# `symbol`: a name triton_python_backend_utils must have for a supported item (checked by the tests); "" for an
# item that is a config parameter rather than a name.
PYTHON_API: tuple[tuple[Item, str], ...] = (
    (
        Item("`TritonPythonModel`: initialize, execute, finalize, auto_complete_config", State.SUPPORTED),
        "ModelConfig",
    ),
    (Item("`Tensor`: numpy, DLPack on CPU", State.SUPPORTED), "Tensor.from_dlpack"),
    (
        Item("`InferenceRequest.exec` / `async_exec` (BLS), decoupled BLS", State.SUPPORTED),
        "InferenceRequest.exec",
    ),
    (Item("Decoupled models: `InferenceResponseSender`", State.SUPPORTED), "InferenceResponseSender.send"),
    (
        Item(
            "Response parameters: `InferenceResponse(parameters=...)` on HTTP, gRPC and `/generate`",
            State.SUPPORTED,
            "",
            "python-backend.md",
            test="tests/e2e/test_python_backend.py::test_response_parameters_reach_http_and_grpc_with_their_types",
        ),
        "InferenceResponse.parameters",
    ),
    (Item("Request cancellation: `is_cancelled`", State.SUPPORTED), "InferenceResponseSender.is_cancelled"),
    (Item("Custom metrics: `MetricFamily`, `Metric`", State.SUPPORTED), "MetricFamily"),
    (Item("`Logger`", State.SUPPORTED), "Logger.log_info"),
    (
        Item("Model control from a model: `load_model`, `unload_model`, `is_model_ready`", State.SUPPORTED),
        "load_model",
    ),
    (Item("`TritonError`, `TritonModelException`", State.SUPPORTED), "TritonModelException"),
    (
        Item(
            "GPU tensors: DLPack on CUDA, `is_cpu()`, `FORCE_CPU_ONLY_INPUT_TENSORS`, GPU tensors through BLS",
            State.UNVERIFIED,
            "tensors cross to the stub process through host memory",
            "python-backend.md",
        ),
        "Tensor.is_cpu",
    ),
    (
        Item(
            "`set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)` and iterative sequences",
            State.SUPPORTED,
            "",
            "sequence-batching.md",
            test="tests/e2e/test_python_backend.py::test_an_iterative_sequence_runs_a_request_until_the_model_releases_it",
        ),
        "InferenceRequest.set_release_flags",
    ),
    (
        Item(
            "`EXECUTION_ENV_PATH` (conda-pack environments); beyond Triton, a model's `requirements.txt`",
            State.SUPPORTED,
            "a tarball is unpacked once, cached by content; requirements are built with uv, cached by hash",
            "python-backend.md",
            test="tests/e2e/test_python_environments.py::test_packed_and_unpacked_environments_run_the_model",
        ),
        "",
    ),
    (
        Item(
            "`request.trace()`, BLS calls as child traces",
            State.SUPPORTED,
            "`get_context()` gives the client's trace context",
            "tracing.md",
            test="tests/e2e/test_tracing.py::test_trace_file_written_at_shutdown",
        ),
        "InferenceRequest.trace",
    ),
)


# --- Features and integrations ----------------------------------------------------------------------------------

FEATURES: tuple[Item, ...] = (
    Item(
        "Model repositories: local, `s3://`, `gs://`, `as://`",
        State.SUPPORTED,
        "",
        "configuration.md",
        test="tests/e2e/test_s3_repository.py::test_infer_on_a_model_from_s3",
    ),
    Item(
        "Model control: none, poll, explicit",
        State.SUPPORTED,
        "",
        "model-management.md",
        flag="model-control-mode",
    ),
    Item(
        "A reload that changes only `instance_group` updates the instances in place",
        State.SUPPORTED,
        "",
        "model-management.md",
        test="tests/e2e/test_instance_update.py::test_instances_are_added_and_removed_while_requests_are_served",
    ),
    Item(
        "Dynamic batching",
        State.SUPPORTED,
        "",
        "configuration.md",
        test="tests/e2e/test_dynamic_batching.py::test_concurrent_requests_run_as_one_batch",
    ),
    Item(
        "Sequence batching: direct and oldest, implicit state, timeouts, preserve_ordering, growable state",
        State.SUPPORTED,
        "not yet: implicit state of a python model (it keeps its own, by correlation id)",
        "sequence-batching.md",
        test="tests/e2e/test_sequence_batching.py::test_many_concurrent_sequences_beyond_the_slots",
    ),
    Item(
        "Ensembles, BLS",
        State.SUPPORTED,
        "",
        "ensembles.md",
        test="tests/e2e/test_ensemble.py::test_chain_of_two_onnx_steps",
    ),
    Item(
        "Model warmup",
        State.SUPPORTED,
        "",
        "configuration.md",
        test="tests/e2e/test_warmup.py::test_warm_models_are_ready_after_every_sample_ran",
    ),
    Item("Response cache: local", State.SUPPORTED, "", "response-cache.md", flag="cache-config"),
    Item(
        "Response cache: redis",
        State.SUPPORTED,
        "Triton's options; a redis down or slow makes requests miss, never fail; extra `redis`",
        "response-cache.md",
        test="tests/e2e/test_redis_cache.py::test_an_answer_computed_by_one_server_is_served_by_the_other",
    ),
    Item("Rate limiter", State.SUPPORTED, "", "rate-limiter.md", flag="rate-limit"),
    Item(
        "Tracing: Triton trace files, OpenTelemetry", State.SUPPORTED, "", "tracing.md", flag="trace-config"
    ),
    Item(
        "Tracing: python `request.trace()`, BLS child traces",
        State.SUPPORTED,
        "",
        "tracing.md",
        test="tests/e2e/test_tracing.py::test_trace_file_written_at_shutdown",
    ),
    Item(
        "Tracing: custom activities a model records",
        State.SUPPORTED,
        "a python model's `request.trace().report_activity(...)` (ours)",
        "tracing.md",
        test="tests/e2e/test_tracing.py::test_opentelemetry_custom_activities_and_bls_calls_are_spans_under_the_model",
    ),
    Item("System shared memory", State.SUPPORTED, "", "shared-memory.md", flag="allow-client-shm"),
    Item(
        "CUDA shared memory",
        State.UNVERIFIED,
        "extra `cuda`; inputs are copied from the device, outputs to it; without a GPU, registration answers "
        "501 / UNIMPLEMENTED with the reason",
        "shared-memory.md",
        test="tests/e2e/test_gpu_cuda_shared_memory.py::test_inputs_and_outputs_in_cuda_shared_memory",
    ),
    Item(
        "Metrics: counters, summaries, histograms, CPU, `--metrics-config`",
        State.SUPPORTED,
        "",
        "metrics.md",
        flag="metrics-config",
    ),
    Item(
        "GPU metrics (`nv_gpu_*`, `nv_energy_consumption`) through NVML",
        State.UNVERIFIED,
        "extra `gpu-metrics`; rendered from a stand-in NVML in the tests",
        "metrics.md",
        test="tests/e2e/test_gpu_metrics.py::test_gpu_gauges_agree_with_nvidia_smi",
    ),
    Item(
        "PyTorch `KIND_GPU` and `KIND_MODEL` instances on CUDA",
        State.UNVERIFIED,
        "",
        "backends/pytorch.md",
        test="tests/e2e/test_gpu_pytorch.py::test_kind_gpu_instances_run_on_cuda",
    ),
    Item(
        "GPU memory flags per device (`--cuda-memory-pool-byte-size`, `--model-load-gpu-limit`), a model's GPU "
        "memory in its statistics",
        State.UNVERIFIED,
        "",
        "model-memory.md",
        test="tests/e2e/test_gpu_pytorch.py::test_model_load_gpu_limit_refuses_a_load_over_the_limit",
    ),
    Item(
        "ONNX Runtime `KIND_GPU` (CUDA and TensorRT execution providers)",
        State.UNVERIFIED,
        "needs `onnxruntime-gpu`, which the GPU check machine does not have either",
        "configuration.md",
        test="tests/e2e/test_gpu.py::test_gpu_instance_serves",
    ),
    Item(
        "The `tritonserver` executable, taking its command line unchanged",
        State.SUPPORTED,
        "installed with modelhost and on the images' PATH; KServe's Triton runtime runs it unchanged",
        "cli.md",
        test="tests/deploy/test_kserve.py::test_kserve_triton_runtime_command_line_runs_the_tritonserver_executable",
    ),
    Item(
        "SageMaker (`/ping`, `/invocations`, multi-model `/models`)",
        State.SUPPORTED,
        "",
        "sagemaker.md",
        flag="allow-sagemaker",
    ),
    Item(
        "Vertex AI",
        State.SUPPORTED,
        "AIP_* variables, predict and health routes, the redirect header, binary media type; served by the "
        "engine process whatever `--frontend-processes`",
        "vertex-ai.md",
        flag="allow-vertex-ai",
        test="tests/e2e/test_vertex_ai.py::test_redirect_serves_the_endpoints_that_read",
    ),
    Item("OpenAI-compatible frontend (Triton's `python/openai`)", State.NOT_YET),
    Item(
        "Model namespacing",
        State.SUPPORTED,
        "`--model-namespacing`: ensembles use their repository's models, `namespace` metric label, ambiguous "
        "names refused; an ambiguous model's errors and logs name it by its directory",
        "model-management.md",
        flag="model-namespacing",
        test="tests/e2e/test_model_namespacing.py::test_each_ensemble_uses_its_own_repositorys_model",
    ),
    Item(
        "gRPC over TLS, mutual TLS (`--grpc-use-ssl`, `--grpc-use-ssl-mutual`)",
        State.SUPPORTED,
        "beyond Triton: certificates reloaded on SIGHUP; HTTPS on the HTTP and SageMaker ports too",
        "security.md",
        flag="grpc-use-ssl",
        test="tests/e2e/test_tls.py::test_grpc_over_mutual_tls",
    ),
    Item(
        "gRPC keepalive, ping policy and connection age (`--grpc-keepalive-*`, `--grpc-http2-*`, "
        "`--grpc-max-connection-age*`)",
        State.SUPPORTED,
        "",
        "grpc.md",
        flag="grpc-keepalive-time",
        test="tests/frontends/grpc/test_keepalive.py::test_a_client_that_pings_too_often_is_told_too_many_pings",
    ),
    Item(
        "Restricted APIs (`--http-restricted-api`, `--grpc-restricted-protocol`)",
        State.SUPPORTED,
        "the SageMaker port too",
        "security.md",
        flag="http-restricted-api",
        test="tests/e2e/test_restricted_apis.py::test_every_http_endpoint_needs_its_header",
    ),
    Item(
        "Header forwarding to request parameters",
        State.SUPPORTED,
        "`--http-header-forward-pattern`, `--grpc-header-forward-pattern`; names come lower-cased",
        "protocols.md",
        flag="http-header-forward-pattern",
        test="tests/e2e/test_header_forwarding.py::test_http_headers_that_match_become_string_parameters",
    ),
    Item(
        "Port reuse (`SO_REUSEPORT` between servers)",
        State.SUPPORTED,
        "`--reuse-http-port`, `--reuse-grpc-port`; without them a second server on a taken port stops, "
        "whatever `--frontend-processes`; but a server that asks for reuse can join one with frontend "
        "processes that did not (they share their port with SO_REUSEPORT among themselves)",
        "cli.md",
        flag="reuse-http-port",
        test="tests/e2e/test_port_reuse.py::test_two_servers_share_the_http_and_grpc_ports",
    ),
    Item(
        "Host policies (NUMA, CPU cores)",
        State.SUPPORTED,
        "`--host-policy` and `host_policy`; the pinned memory pool it also sizes in Triton does not exist here",
        "configuration.md",
        flag="host-policy",
        test="tests/e2e/test_host_policy.py::test_a_groups_own_policy_places_its_stub_process",
    ),
    Item(
        "perf_analyzer",
        State.PARTLY,
        "`modelhost perf`; what it lacks is listed in its page",
        "perf.md",
        test="tests/e2e/test_perf.py::test_http_sweep_writes_csv_export_and_plot",
    ),
    Item(
        "Model Analyzer",
        State.PARTLY,
        "`modelhost tune`, one model at a time: quick and brute searches, no optuna search, no request-rate "
        "sweeps, no ensembles, sequence or decoupled models, HTML/PNG reports instead of PDF",
        "tune.md",
        test="tests/e2e/test_tune_run.py::test_the_best_config_is_written_with_a_diff_and_loads_and_serves",
    ),
    Item(
        "Container images (CPU, GPU; `serve` for SageMaker)",
        State.SUPPORTED,
        "`deploy/docker/`; built here by replaying their install steps, the GPU image is resolved only",
        "deploy/images.md",
        test="tests/deploy/test_images.py::test_cpu_image_serves_every_bundled_example",
    ),
    Item(
        "Helm chart, autoscaling on queue metrics (HPA or KEDA)",
        State.SUPPORTED,
        "`deploy/helm/modelhost`",
        "deploy/kubernetes.md",
        test="tests/deploy/test_helm_autoscaling.py::test_replicas_rise_under_load_and_fall_back_when_idle",
    ),
    Item(
        "Beyond Triton: per-model scaling on a Ray cluster",
        State.SUPPORTED,
        "`modelhost ray serve`: each model or group a Ray Serve deployment scaling on its own, a multiplexed pool "
        "for the long tail (with a memory budget per replica), ensembles whose steps run in other deployments, "
        "one HTTP/gRPC address with `modelhost serve`'s TLS and restricted APIs, a KubeRay RayService (validated "
        "offline); the link to the replicas is not encrypted",
        "ray.md",
        test="tests/cluster/test_ray_serve.py::test_one_model_scales_out_under_load_and_back",
    ),
    Item(
        "KServe ServingRuntime",
        State.SUPPORTED,
        "`deploy/kserve/`",
        "deploy/kserve.md",
        test="tests/deploy/test_kserve.py::test_inference_over_both_protocols_and_metrics",
    ),
    Item(
        "Amazon ECS and SageMaker endpoint configurations",
        State.SUPPORTED,
        "`deploy/ecs/`, `deploy/sagemaker/`",
        "deploy/ecs.md",
        test="tests/deploy/test_aws_shapes.py::test_policy_signal_rises_under_load_and_is_zero_idle",
    ),
    Item(
        "The in-process `tritonserver` Python API",
        State.PARTLY,
        "`modelhost.Server` and `modelhost.Model`: start, load, unload, metadata, config, statistics, infer and "
        "stream with numpy arrays, with or without the frontends; calls are synchronous (no asyncio API, no "
        "DLPack tensors or custom allocators), and the names are modelhost's",
        "python-api.md",
        test="tests/e2e/test_python_api.py::test_each_backend_answers_through_the_api_as_over_http",
    ),
    Item(
        "A web console at `GET /` (modelhost only; Triton has none)",
        State.SUPPORTED,
        "the server, every model with its state, configuration (as config.pbtxt) and memory, live charts from the "
        "statistics, load / unload / reload with a config override through the repository API; readable without "
        "JavaScript, behind a path prefix, `--http-console=false` turns it off, `console` is a restricted-API "
        "category",
        "console.md",
        test="tests/e2e/test_console.py::test_load_and_unload_through_the_buttons",
    ),
    Item(
        "The C API (`libtritonserver.so`)",
        State.NOT_PLANNED,
        "modelhost is a Python server; C programs use its HTTP or gRPC API",
    ),
)


# --- Triton's own test suites ----------------------------------------------------------------------------------

# The latest run of Triton's qa suites (qa/L0_* at v2.51.0) against modelhost with scripts/triton_qa.py, a
# development and release tool (it needs a checkout of Triton's repository and minutes per suite, so CI does not
# run it); docs/triton-qa.md lists the suites, how to run them, and every test that fails with its reason.
QA_SUITES_RESULT = (
    "Triton's qa suites: 874 of 941 tests pass (22 suites; of the others 18 need features of other open issues, "
    "41 a GPU, 8 meet the differences on purpose below), and L0_http_fuzz's 80,260 fuzzed requests fail none, on "
    "2026-11-27"
)

# Answers that stay different from Triton's on purpose (the qa tests that expect Triton's fail on them).
DELIBERATE_DIFFERENCES: tuple[str, ...] = (
    "`--http-max-input-size` defaults to 64 MiB (Triton 2.51: no limit; later Triton releases adopted the same "
    "default after a security advisory): larger requests are refused with 400 naming the flag",
    "a clear 4xx where Triton answers 500 to a client's mistake: malformed JSON values, an empty shared-memory region "
    "name, a shared-memory key that cannot be opened, an output larger than its shared-memory window, a region in "
    "use that is unregistered (409), a python model's error response for invalid arguments",
    "4xx and 5xx answers carry the error's own status where Triton answers a fixed one (`/generate` with other than "
    "one answer: 400, Triton 200; a first /generate answer that is an error: its own status, Triton 400)",
    "on SIGTERM / SIGINT, inference stops being accepted at once on every port (503 / UNAVAILABLE in Triton's "
    "words, the ports open until the requests in flight are done) and idle keep-alive HTTP connections are closed "
    "then; Triton 2.51 first waits, up to the exit timeout, for its clients to close every HTTP connection, serving "
    "them meanwhile ([deploy.md](deploy.md))",
    "BLS from a process a python model forks (`multiprocessing`) is refused with a clear error; Triton serves it "
    "([python-backend.md](python-backend.md))",
    "the verbose log (`--log-verbose`) tells what modelhost does: each request, load and setting, in Triton's words "
    "where Triton has them (a cancelled gRPC call's `Cancellation notification received for ...` among them). It "
    "does not narrate Triton's internals, which modelhost does not have: the handler objects of tritonserver's "
    "gRPC threads (`New request handler for ModelInferHandler`, `... step START`) and its backends' API calls. A "
    "scraper that counts those lines finds fewer (L0_logging expects at least 75 after two example clients, "
    "modelhost writes about 30; L0_request_cancellation's step-START test first counts the handlers)",
    "a request with several inputs of the wrong size is refused naming the first of them in the request's order; "
    "Triton names the one its hash map happens to visit first",
)


__all__ = [
    "BACKEND_NOTES",
    "DELIBERATE_DIFFERENCES",
    "EXTENSION_NOTES",
    "FEATURES",
    "GRPC_HEALTH",
    "GRPC_NOT_SERVED",
    "HTTP_ENDPOINTS",
    "METRIC_CONDITIONS",
    "METRIC_NOTES",
    "PYTHON_API",
    "QA_SUITES_RESULT",
    "TRITON_BACKENDS",
    "TRITON_EXTENSIONS",
    "TRITON_METRIC_FAMILIES",
    "Endpoint",
    "Item",
    "Probe",
    "State",
]
