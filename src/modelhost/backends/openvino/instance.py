"""One model instance: an infer request on the version's compiled model, run synchronously per batch.

The per-batch path does only what the batch needs: each input array is wrapped (not copied) as an ov.Tensor and
set by position, the request runs (OpenVINO releases the GIL while it does), and each requested output is copied
out of the request's memory, which the next run reuses. Ports, converters and names are resolved at load.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelhost.backends.api import Arrays
from modelhost.backends.openvino.element_types import Reader, Writer
from modelhost.errors import BackendInvalidArgument, InternalError


@dataclass(frozen=True, slots=True)
class InstancePlan:
    """What every instance of a version shares: ports by name, and the batch handling."""

    inputs: dict[str, tuple[int, Writer]]
    outputs: dict[str, tuple[int, Reader]]
    static_batch: int | None  # the model's fixed batch size, None: any
    pad_batch: bool  # ENABLE_BATCH_PADDING: a smaller batch is padded to static_batch
    # Copy inputs into the request's own tensors instead of handing it tensors that wrap the arrays: needed
    # where the compiled model answers an output straight from an input (backend.py `_passes_inputs_through`).
    copy_inputs: bool = False


class OpenVINOInstance:
    def __init__(
        self, name: str, model_name: str, compiled: Any, plan: InstancePlan, release: Callable[[], None]
    ) -> None:
        self.name = name
        self.model_name = model_name
        self._plan = plan
        self._request: Any = compiled.create_infer_request()
        self._release: Callable[[], None] | None = release

    def execute(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        rows: int | None = None
        if self._plan.static_batch is not None:
            inputs, rows = self._fit_batch(inputs, self._plan.static_batch)
        request = self._request
        if request is None:
            raise InternalError(f"instance '{self.name}' of model '{self.model_name}' is closed")
        plan_inputs = self._plan.inputs
        missing = [name for name in plan_inputs if name not in inputs]
        if missing:
            # An `optional` input left out: OpenVINO would run on the last batch's tensor, whose memory is freed
            # (wrong answers, then a crash), and a model graph has no "absent" input to give it instead.
            raise BackendInvalidArgument(
                f"model '{self.model_name}' needs every input on the OpenVINO backend; missing: {missing}"
            )
        # The memory the input tensors wrap, alive until the outputs are copied: OpenVINO may answer an output
        # straight from an input's memory (a pass-through model).
        held = []
        try:
            for name, array in inputs.items():
                index, write = plan_inputs[name]
                tensor, memory = write(array)
                held.append(memory)
                if self._plan.copy_inputs:
                    target = request.get_input_tensor(index)
                    target.shape = tensor.shape
                    tensor.copy_to(target)
                else:
                    request.set_input_tensor(index, tensor)
        except (RuntimeError, TypeError, ValueError) as e:
            # A shape or type the compiled model does not take (a fixed dimension the config leaves at -1).
            raise BackendInvalidArgument(f"openvino error for model '{self.model_name}': {_reason(e)}") from e
        try:
            request.infer()
        except Exception as e:  # any runtime fault fails this batch only
            raise InternalError(f"openvino error for model '{self.model_name}': {_reason(e)}") from e
        plan_outputs = self._plan.outputs
        results: Arrays = {}
        for name in output_names:
            index, read = plan_outputs[name]
            results[name] = read(request.get_output_tensor(index), rows)
        del held
        return results

    def _fit_batch(self, inputs: Arrays, size: int) -> tuple[Arrays, int | None]:
        """Inputs of a model fixed at batch `size`: as they are when the batch has that size, else padded with
        zeros (empty strings) when ENABLE_BATCH_PADDING allows, with the real row count to cut outputs to."""
        batch = next(iter(inputs.values())).shape[0] if inputs else size
        if batch == size:
            return inputs, None
        if not self._plan.pad_batch:
            # Triton's words (the scheduler, not the client, makes the batch: INTERNAL).
            raise InternalError(
                f"expected requests with batch size '{size}', got '{batch}'... this error can be avoided by "
                "setting 'ENABLE_BATCH_PADDING' parameter in model configuration to 'YES' at a performance cost."
            )
        padded: Arrays = {}
        for name, array in inputs.items():
            full = np.zeros((size, *array.shape[1:]), dtype=array.dtype)
            if array.dtype == np.object_:
                full.fill(b"")
            full[:batch] = array
            padded[name] = full
        return padded, batch

    def close(self) -> None:
        self._request = None
        release, self._release = self._release, None
        if release is not None:
            release()


def _reason(error: BaseException) -> str:
    """OpenVINO's messages open with C++ source locations; the reason is their last non-empty line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


__all__ = ["InstancePlan", "OpenVINOInstance"]
