"""OUTPUT = INPUT, after sleeping INPUT milliseconds (a slow request and a fast one finish out of order)."""

import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            time.sleep(int(value.flatten()[0]) / 1000)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", value)]))
        return responses
