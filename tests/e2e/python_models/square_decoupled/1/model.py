"""Triton's "square" example: for IN = n, n responses each with OUT = n, then the final flag alone."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            in_tensor = pb_utils.get_input_tensor_by_name(request, "IN")
            sender = request.get_response_sender()
            for _ in range(int(in_tensor.as_numpy()[0])):
                sender.send(
                    pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", in_tensor.as_numpy())])
                )
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
