"""The verbose log of requests (--log-verbose >= 1), as Triton's: each request as it reaches its model version,
and how long a successful one took."""

from __future__ import annotations

import logging

from modelhost.engine.model import LoadedModel
from modelhost.io_specs import format_shape
from modelhost.observability.stats import RequestTiming
from modelhost.tensor_codec import id_prefix
from modelhost.types import InferenceRequest

log = logging.getLogger("modelhost.server")


def log_received(request: InferenceRequest, model: LoadedModel) -> None:
    """A request as the verbose log shows it: model, version, ids, flags, inputs and requested outputs."""
    inputs = ", ".join(f"{t.name} {t.datatype} {format_shape(t.shape)}" for t in request.inputs)
    outputs = ", ".join(o.name for o in request.outputs) or "all"
    sequence = {k: v for k, v in request.parameters.items() if k.startswith("sequence_")}
    log.debug(
        "%s",
        f"{id_prefix(request.id)}request for model '{model.name}', requested version "
        f"{request.model_version or -1}, actual version {model.version_str}, priority {request.priority}, "
        f"timeout (us) {request.timeout_us}{f', {sequence}' if sequence else ''}; inputs: {inputs}; "
        f"outputs: {outputs}",
    )


def log_succeeded(
    request: InferenceRequest, model: LoadedModel, elapsed_ns: int, timing: RequestTiming
) -> None:
    log.debug(
        "%srequest for model '%s' version %s succeeded in %d us (queue %d us, compute %d us)",
        id_prefix(request.id),
        model.name,
        model.version_str,
        elapsed_ns // 1000,
        timing.queue_ns // 1000,
        (timing.input_ns + timing.infer_ns + timing.output_ns) // 1000,
    )
