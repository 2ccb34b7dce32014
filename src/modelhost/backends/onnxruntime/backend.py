"""ONNX Runtime backend: one InferenceSession per instance.

ONNX Runtime releases the GIL while it runs, so instances on worker threads execute in parallel. Thread budgets:
unless the config or --backend-config says otherwise, a model's instances share the cores (backends/cpu_threads.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from modelhost.backends.api import Arrays, BackendContext
from modelhost.backends.cpu_threads import default_intra_op_threads
from modelhost.backends.model_io import TensorInfo, check_io, config_shape, fed_by_server
from modelhost.backends.onnxruntime.autocomplete import autocomplete_onnx
from modelhost.backends.onnxruntime.cuda import cuda_provider_options
from modelhost.backends.onnxruntime.custom_ops import register_op_libraries
from modelhost.backends.params import int_param, param
from modelhost.datatypes import ONNX_TO_CONFIG
from modelhost.errors import BackendInvalidArgument, InternalError, InvalidArgument, ModelConfigError


def _int_setting(ctx: BackendContext, key: str) -> int | None:
    """A thread setting from the model's parameters, else from --backend-config=onnxruntime,<key>=N;
    0 = the runtime's default, as in Triton."""
    return int_param(ctx.config, key, fallback=ctx.backend_config) or None


def model_file(ctx: BackendContext) -> Path:
    name = ctx.config.default_model_filename or "model.onnx"
    path = ctx.version_dir / name
    if path.is_dir():  # Triton accepts a directory holding model.onnx (models with external data)
        path = path / "model.onnx"
    if not path.is_file():
        raise ModelConfigError(
            f"unable to load model '{ctx.model_name}' version {ctx.version}: model file '{path}' not found"
        )
    return path


def session_options(ctx: BackendContext) -> ort.SessionOptions:
    opts = ort.SessionOptions()
    intra = _int_setting(ctx, "intra_op_thread_count")
    inter = _int_setting(ctx, "inter_op_thread_count")
    opts.intra_op_num_threads = intra if intra is not None else default_intra_op_threads(ctx.total_instances)
    opts.inter_op_num_threads = inter if inter is not None else 1
    mode = param(ctx.config, "execution_mode")
    if mode is not None:
        if mode not in ("0", "1"):
            raise ModelConfigError(
                f"model '{ctx.model_name}': parameter 'execution_mode' must be 0 (sequential) or 1 (parallel)"
            )
        opts.execution_mode = (
            ort.ExecutionMode.ORT_PARALLEL if mode == "1" else ort.ExecutionMode.ORT_SEQUENTIAL
        )
    for key, attr in (
        ("enable_mem_arena", "enable_cpu_mem_arena"),
        ("enable_mem_pattern", "enable_mem_pattern"),
    ):
        raw = param(ctx.config, key)
        if raw is not None:
            setattr(opts, attr, raw.lower() in ("1", "true", "on"))
    level = int(ctx.config.optimization.graph.level)
    opts.graph_optimization_level = {
        -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        1: ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }.get(level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    register_op_libraries(opts, ctx.config, ctx.model_name)
    return opts


def gpu_providers(ctx: BackendContext, device_id: int) -> list[Any]:
    """Execution providers for a KIND_GPU instance, or a load error naming what is missing."""
    if ctx.gpu_count == 0:
        raise ModelConfigError(
            f"unable to load model '{ctx.model_name}': instance group kind KIND_GPU needs a GPU, and none is visible"
        )
    available = ort.get_available_providers()
    if "CUDAExecutionProvider" not in available:
        raise ModelConfigError(
            f"unable to load model '{ctx.model_name}': KIND_GPU needs ONNX Runtime's CUDAExecutionProvider, "
            "which this onnxruntime build lacks (install the 'onnxruntime-gpu' package)"
        )
    providers: list[Any] = []
    for accel in ctx.config.optimization.execution_accelerators.gpu_execution_accelerator:
        if accel.name == "tensorrt":
            if "TensorrtExecutionProvider" not in available:
                raise ModelConfigError(
                    f"unable to load model '{ctx.model_name}': the 'tensorrt' execution accelerator needs "
                    "ONNX Runtime's TensorrtExecutionProvider, which this onnxruntime build lacks"
                )
            trt: dict[str, Any] = {"device_id": device_id}
            for key, value in accel.parameters.items():
                if key == "precision_mode":
                    trt["trt_fp16_enable"] = value.upper() == "FP16"
                    trt["trt_int8_enable"] = value.upper() == "INT8"
                elif key == "max_workspace_size_bytes":
                    trt["trt_max_workspace_size"] = int(value)
                elif key.startswith("trt_"):
                    trt[key] = value
            providers.append(("TensorrtExecutionProvider", trt))
        elif accel.name == "cuda":
            continue  # the CUDA provider is added below with its parameters
        else:
            raise ModelConfigError(
                f"unable to load model '{ctx.model_name}': unknown GPU execution accelerator '{accel.name}'"
            )
    # --cuda-memory-pool-byte-size first, so that a model's own `cuda` accelerator parameters win over it.
    cuda: dict[str, Any] = {"device_id": device_id, **cuda_provider_options(ctx.gpu_memory, device_id)}
    for accel in ctx.config.optimization.execution_accelerators.gpu_execution_accelerator:
        if accel.name == "cuda":
            cuda.update(dict(accel.parameters.items()))
    providers.append(("CUDAExecutionProvider", cuda))
    return providers


class OnnxRuntimeInstance:
    def __init__(
        self,
        name: str,
        model_name: str,
        session: ort.InferenceSession,
        scalar_outputs: dict[str, list[int]] | None = None,
    ) -> None:
        self.name = name
        self.model_name = model_name
        self.session = session
        self.string_inputs = {i.name for i in session.get_inputs() if i.type == "tensor(string)"}
        self.string_outputs = {o.name for o in session.get_outputs() if o.type == "tensor(string)"}
        self.scalar_inputs = {i.name for i in session.get_inputs() if not i.shape}
        # Outputs the model gives as scalars, with the shape the config gives them (Triton's rule).
        self.scalar_outputs = scalar_outputs or {}

    def execute(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        feed = inputs
        encoding = "utf-8"
        if self.string_inputs or self.scalar_inputs:
            feed = dict(inputs)
            for name in self.scalar_inputs & feed.keys():
                feed[name] = _scalar(name, feed[name])
            strings = self.string_inputs & feed.keys()
            encoding = _string_encoding(feed[name] for name in strings)
            for name in strings:
                feed[name] = _bytes_to_str(feed[name], encoding)
        try:
            results = self.session.run(output_names, feed)
        except ort.capi.onnxruntime_pybind11_state.InvalidArgument as e:
            raise BackendInvalidArgument(f"onnx runtime error for model '{self.model_name}': {e}") from e
        except Exception as e:  # any runtime fault fails this request only
            raise InternalError(f"onnx runtime error for model '{self.model_name}': {e}") from e
        out: Arrays = {}
        for name, value in zip(output_names, results, strict=True):
            if name in self.string_outputs:
                value = _str_to_bytes(value, encoding)
            if value.ndim == 0 and name in self.scalar_outputs:
                value = value.reshape(self.scalar_outputs[name])
            out[name] = value
        return out

    def close(self) -> None:
        del self.session


def _scalar(name: str, array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A scalar input (rank 0 in the model, all 1s in the config) as the model takes it."""
    if array.size != 1:
        raise InvalidArgument(
            f"input '{name}' is a scalar in the model: it takes one element, got shape {list(array.shape)}"
        )
    return array.reshape(())


# ONNX Runtime's string tensors hold text (its Python API takes str and gives str, as UTF-8). Triton hands the
# bytes through unchanged. A request whose strings are all UTF-8 goes as text; one with bytes that are not is
# carried as Latin-1 (one character per byte, both ways), so that its bytes come back as they were.
def _string_encoding(arrays: Iterable[np.ndarray[Any, Any]]) -> str:
    try:
        for array in arrays:
            for v in array.ravel():
                if isinstance(v, bytes):
                    v.decode("utf-8")
    except UnicodeDecodeError:
        return "latin-1"
    return "utf-8"


def _bytes_to_str(array: np.ndarray[Any, Any], encoding: str) -> np.ndarray[Any, Any]:
    flat = [v.decode(encoding) if isinstance(v, bytes) else str(v) for v in array.ravel()]
    return np.array(flat, dtype=object).reshape(array.shape)


def _str_to_bytes(array: np.ndarray[Any, Any], encoding: str) -> np.ndarray[Any, Any]:
    flat = []
    for s in array.ravel():
        try:
            flat.append(s.encode(encoding))
        except UnicodeEncodeError:  # a character the model made that Latin-1 has not: it is text
            flat.append(s.encode("utf-8"))
    return np.array(flat, dtype=object).reshape(array.shape)


def _tensor_info(arg: Any, scalar: bool = False) -> TensorInfo:
    # Symbolic and unknown dimensions ("batch", None) accept any size; a scalar's shape is checked apart.
    dims = None if scalar else tuple(d if isinstance(d, int) and d >= 0 else -1 for d in (arg.shape or []))
    return TensorInfo(arg.name, ONNX_TO_CONFIG.get(arg.type, arg.type), dims)


def _check_names(ctx: BackendContext, session: ort.InferenceSession) -> None:
    """Triton's ONNX Runtime backend first counts the inputs (the config's and those the server feeds), then
    looks up each config tensor's name in the model: its words for both, which Triton's qa suites grep for."""
    inputs = {i.name for i in session.get_inputs()}
    expected = len(ctx.config.input) + len(fed_by_server(ctx.config))
    if expected != len(inputs):
        raise ModelConfigError(
            f"unable to load model '{ctx.model_name}', configuration expects {expected} inputs, model provides "
            f"{len(inputs)}"
        )
    allowed_inputs = inputs | {i.name for i in session.get_overridable_initializers()}
    outputs = {o.name for o in session.get_outputs()}
    for kind, configured, allowed in (
        ("input", ctx.config.input, allowed_inputs),
        ("output", ctx.config.output, outputs),
    ):
        for tensor in configured:
            if tensor.name not in allowed:
                raise ModelConfigError(
                    f"unexpected inference {kind} '{tensor.name}', allowed {kind}s are: {', '.join(sorted(allowed))}"
                )


def _check_io(ctx: BackendContext, session: ort.InferenceSession) -> dict[str, list[int]]:
    """The config's inputs and outputs must exist in the model with the same types and shapes, as Triton checks
    at load. Control and implicit-state inputs of a sequence model, and batch inputs, are fed by the server:
    Triton does not ask the config to list them. A tensor the model declares without dimensions (a scalar) may
    have only 1s in the config; the outputs among them are given that shape. Returns those outputs."""
    _check_names(ctx, session)
    configured = {t.name: t for t in (*ctx.config.input, *ctx.config.output)}
    scalars = {a.name for a in (*session.get_inputs(), *session.get_outputs()) if not a.shape}
    for name in (n for n in configured if n in scalars):  # inputs first, in config order, as Triton
        dims = config_shape(configured[name])
        if any(d != 1 for d in dims):
            raise ModelConfigError(
                f"unable to load model '{ctx.model_name}', scalar tensor '{name}', should only provide 1 in the "
                f"model configuration when the model doesn't support batching. Model configuration provided: "
                f"[{','.join(str(d) for d in dims)}]."
            )
    check_io(
        ctx.model_name,
        ctx.config,
        {i.name: _tensor_info(i, i.name in scalars) for i in session.get_inputs()},
        {o.name: _tensor_info(o, o.name in scalars) for o in session.get_outputs()},
        fed_by_server=fed_by_server(ctx.config),
    )
    return {
        o.name: config_shape(configured[o.name])
        for o in session.get_outputs()
        if o.name in scalars and o.name in configured
    }


class OnnxRuntimeBackend:
    name = "onnxruntime"

    @staticmethod
    def gpu_capable() -> bool:
        """Only the onnxruntime-gpu build has the CUDA provider; with the CPU build, a model that does not ask
        for KIND_GPU runs on the CPU of a GPU host (registry.runs_on_gpu)."""
        return "CUDAExecutionProvider" in ort.get_available_providers()

    @staticmethod
    def autocomplete(
        config: Any, model_dir: Path, *, default_max_batch_size: int, settings: Mapping[str, str]
    ) -> None:
        """Inputs, outputs and max_batch_size from the ONNX model itself."""
        autocomplete_onnx(config, model_dir.name, model_dir, default_max_batch_size=default_max_batch_size)

    def load_instance(
        self, ctx: BackendContext, group: Any, index: int, device_id: int
    ) -> OnnxRuntimeInstance:
        path = model_file(ctx)
        kind = group.DESCRIPTOR.fields_by_name["kind"].enum_type.values_by_number[group.kind].name
        providers: list[Any] = (
            gpu_providers(ctx, device_id) if kind == "KIND_GPU" else ["CPUExecutionProvider"]
        )
        try:
            session = ort.InferenceSession(str(path), sess_options=session_options(ctx), providers=providers)
        except Exception as e:
            raise ModelConfigError(
                f"unable to load model '{ctx.model_name}' version {ctx.version}: {e}"
            ) from e
        scalar_outputs = _check_io(ctx, session)
        instance = OnnxRuntimeInstance(f"{group.name}_{index}", ctx.model_name, session, scalar_outputs)
        del session  # the instance holds it alone, so closing the instance releases its memory
        return instance
