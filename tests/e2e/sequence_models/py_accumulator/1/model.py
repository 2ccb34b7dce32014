"""Triton-style stateful python model: OUTPUT = sum of INPUT over the sequence so far.

The sum lives in this instance's process, keyed by correlation id: it works only if every request of a sequence
reaches this same instance. START resets the sum, END forgets it. FLAGS echoes the request flags, PID the process.
"""

import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            corrid = request.correlation_id()
            flags = request.flags()
            value = int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()[0, 0])
            if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
                self.sums[corrid] = 0
            if corrid not in self.sums:
                responses.append(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(f"no state for sequence {corrid}"))
                )
                continue
            self.sums[corrid] += value
            total = self.sums[corrid]
            if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
                del self.sums[corrid]
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("OUTPUT", np.array([[total]], dtype=np.int32)),
                        pb_utils.Tensor("FLAGS", np.array([[flags]], dtype=np.int32)),
                        pb_utils.Tensor("PID", np.array([[os.getpid()]], dtype=np.int64)),
                    ]
                )
            )
        return responses
