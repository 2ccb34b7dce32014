import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            source = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            on_gpu = np.array([int(not source.is_cpu())], np.int64)
            outputs = [pb_utils.Tensor("OUTPUT0", source.as_numpy()), pb_utils.Tensor("ON_GPU", on_gpu)]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
