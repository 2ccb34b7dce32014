"""Stand-in for Triton's C++ `sequence` test backend (server/src/test/sequence), as a python model.

Inputs START, READY (INT32 control inputs) and INPUT (INT32 [-1]), output OUTPUT. Each instance keeps one INT32
accumulator per batch slot (max(1, max_batch_size) of them; the request at position r of an execution is slot
r): READY=0 leaves it and answers no output; READY=1, START=1 sets it to the sum of INPUT; READY=1, START=0
adds the sum of INPUT. With READY=1 every element of OUTPUT is the accumulator. `execute_delay_ms` is slept
once per execution. The runner copies this file into models whose config says `backend: "sequence"`.
"""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = config.get("parameters", {}) or {}
        delay = params.get("execute_delay_ms")
        self.delay_ms = int(delay.get("string_value", "0")) if isinstance(delay, dict) else 0
        max_batch_size = int(config.get("max_batch_size", 0) or 0)
        self.batching = max_batch_size > 0
        self.size = max(1, max_batch_size)
        self.acc = [np.int32(0)] * self.size

    def execute(self, requests):
        if len(requests) > self.size:
            raise pb_utils.TritonModelException("unable to execute batch larger than max-batch-size")
        if self.delay_ms > 0:
            time.sleep(self.delay_ms / 1000.0)
        responses = []
        for r, request in enumerate(requests):
            data = pb_utils.get_input_tensor_by_name(request, "INPUT")
            start = pb_utils.get_input_tensor_by_name(request, "START")
            ready = pb_utils.get_input_tensor_by_name(request, "READY")
            if data is None or start is None or ready is None:
                missing = "INPUT" if data is None else ("START" if start is None else "READY")
                responses.append(
                    pb_utils.InferenceResponse(
                        error=pb_utils.TritonError(f"failed to read input '{missing}'")
                    )
                )
                continue
            values = data.as_numpy()
            if self.batching and values.ndim > 0 and values.shape[0] != 1:
                responses.append(
                    pb_utils.InferenceResponse(
                        error=pb_utils.TritonError("unable to execute more than one timestep at a time")
                    )
                )
                continue
            if int(ready.as_numpy().flatten()[0]) == 0:
                responses.append(pb_utils.InferenceResponse(output_tensors=[]))
                continue
            flat = values.astype(np.int64).flatten()
            total = int(flat.sum())
            acc = total if int(start.as_numpy().flatten()[0]) != 0 else int(self.acc[r]) + total
            self.acc[r] = np.array(acc).astype(np.int32)
            out = np.full(values.shape, self.acc[r], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", out)]))
        return responses
