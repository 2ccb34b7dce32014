"""BYTES both ways: OUTPUT0 = INPUT0 upper-cased (UTF-8), LENGTH = the byte length of each input element."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            upper = np.array([s.decode("utf-8").upper().encode("utf-8") for s in in_0.flat], dtype=np.object_)
            lengths = np.array([len(s) for s in in_0.flat], dtype=np.int32)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", upper.reshape(in_0.shape)),
                        pb_utils.Tensor("LENGTH", lengths.reshape(in_0.shape)),
                    ]
                )
            )
        return responses
