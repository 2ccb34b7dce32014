"""An iterative sequence, not decoupled: each request is handed back (RESCHEDULE, None in the returned list) on its
first execution and answered on its second: OUTPUT0 = INPUT0 + INPUT1, RUNS = the executions it took."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.runs = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            sequence = request.correlation_id()
            self.runs[sequence] = self.runs.get(sequence, 0) + 1
            if self.runs[sequence] == 1:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(None)
                continue
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            runs = np.array([self.runs.pop(sequence)], np.int32)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT0", in_0 + in_1), pb_utils.Tensor("RUNS", runs)]
                )
            )
        return responses
