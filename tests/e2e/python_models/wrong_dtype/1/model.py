"""The config says OUTPUT0 is TYPE_FP32; the model answers an INT64 tensor."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", in_0.astype(np.int64))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
