"""An iterative sequence, decoupled: IN = n sends OUT = n-1, n-2, ..., 0, one per execution, handing the request
back (RESCHEDULE) after each but the last. Its progress is kept per sequence: the server gives a request without a
sequence id one of its own, the same for every execution. STEP counts the executions of that request."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.left = {}  # correlation id -> responses still to send

    def execute(self, requests):
        for request in requests:
            sequence = request.correlation_id()
            first = bool(request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START)
            if first:
                self.left[sequence] = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            self.left[sequence] -= 1
            left = self.left[sequence]
            out = pb_utils.Tensor("OUT", np.array([left], np.int32))
            response = pb_utils.InferenceResponse([out], parameters={"first": first, "sequence": sequence})
            sender = request.get_response_sender()
            if left > 0:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(response)
            else:
                del self.left[sequence]
                sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
