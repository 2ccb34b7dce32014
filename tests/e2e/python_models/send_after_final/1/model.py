"""Decoupled: sends one response (OUTPUT0 = INPUT0, LAST_ERROR = what the previous request's send after the
final flag raised, "" at first), then the final flag, then one more send, which must raise. The exception is
logged and kept for the next request's LAST_ERROR."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.last_error = ""

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            last_error = np.array([self.last_error.encode("utf-8")], dtype=np.object_)
            outputs = [pb_utils.Tensor("OUTPUT0", in_0), pb_utils.Tensor("LAST_ERROR", last_error)]
            sender.send(pb_utils.InferenceResponse(output_tensors=outputs))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            try:
                sender.send(pb_utils.InferenceResponse(output_tensors=outputs))
                self.last_error = "no exception"
            except Exception as e:
                self.last_error = f"{type(e).__name__}: {e}"
            pb_utils.Logger.log_warn(f"send_after_final: send after the final flag: {self.last_error}")
        return None
