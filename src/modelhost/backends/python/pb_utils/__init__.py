"""`triton_python_backend_utils` for modelhost's python backend: the API a Triton `model.py` imports as pb_utils.

The stub process puts this package in `sys.modules["triton_python_backend_utils"]` before importing the model, so
`import triton_python_backend_utils as pb_utils` gives the model Triton's names, signatures, defaults and error
messages. In Triton part of this API is Python (src/resources/triton_python_backend_utils.py) and part is C++
bound with pybind11 (src/pb_stub.cc); here it is all Python, and everything that needs the server goes through one
object the stub installs with `runtime.set_runtime` (see `Runtime`). Without a runtime (a model file imported by a
plain test) BLS, response senders, metrics and model control raise TritonModelException, and Logger prints to
stderr.

This package re-exports Triton's names, exactly those a model could use (tests/backends/python/pb_utils/
test_names.py holds the list); each lives in a module of its own job: errors, datatypes, tensors, requests,
responses, senders, bls, model_config, logger, metrics, model_control, and the runtime seam.

For the stub (not part of Triton's API):

- `Tensor(name, array)` never copies a C-contiguous array, so tensors built on views of shared memory stay views.
- `InferenceRequest._from_server(...)` builds the requests given to `execute`; `request._server_key()`,
  `request._release_flags()` and the sender's `_update_state` / `_close` / `_is_closed` are what the stub needs
  to apply Triton's rules to what `execute` returns.
- `InferenceResponse.output_tensors()`, `.error()` and `.parameters()` read a response back.
- `ResponseIterator(responses, cancel)` wraps the responses of a decoupled BLS request.
"""

from __future__ import annotations

from modelhost.backends.python.pb_utils.bls import (
    TRITONSERVER_MEMORY_CPU,
    TRITONSERVER_MEMORY_GPU,
    MemoryType,
    PreferredMemory,
    ResponseIterator,
)
from modelhost.backends.python.pb_utils.datatypes import (
    TRITON_STRING_TO_NUMPY,
    deserialize_bytes_tensor,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_string_to_numpy,
    triton_to_numpy_type,
)
from modelhost.backends.python.pb_utils.errors import TritonError, TritonModelException
from modelhost.backends.python.pb_utils.logger import Logger
from modelhost.backends.python.pb_utils.metrics import (
    COUNTER,
    GAUGE,
    HISTOGRAM,
    Metric,
    MetricFamily,
    MetricKind,
)
from modelhost.backends.python.pb_utils.model_config import (
    ModelConfig,
    get_input_config_by_name,
    get_output_config_by_name,
    using_decoupled_model_transaction_policy,
)
from modelhost.backends.python.pb_utils.model_control import is_model_ready, load_model, unload_model
from modelhost.backends.python.pb_utils.requests import (
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    InferenceRequest,
    InferenceTrace,
    get_input_tensor_by_name,
)
from modelhost.backends.python.pb_utils.responses import InferenceResponse, get_output_tensor_by_name
from modelhost.backends.python.pb_utils.runtime import Runtime, get_model_dir
from modelhost.backends.python.pb_utils.senders import (
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    InferenceResponseSender,
)
from modelhost.backends.python.pb_utils.tensors import Tensor

__all__ = [
    "COUNTER",
    "GAUGE",
    "HISTOGRAM",
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
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
]
