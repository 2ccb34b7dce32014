"""BLS into a decoupled model: exec(decoupled=True) on repeat_decoupled, summing the responses it streams."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            bls = pb_utils.InferenceRequest(
                model_name="repeat_decoupled",
                requested_output_names=["OUT"],
                inputs=[
                    pb_utils.Tensor("IN", values.astype(np.int32)),
                    pb_utils.Tensor("DELAY", np.zeros(values.shape, dtype=np.uint32)),
                ],
            )
            total, count = 0, 0
            for response in bls.exec(decoupled=True):
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                total += int(pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()[0])
                count += 1
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("SUM", np.array([total], dtype=np.int32)),
                        pb_utils.Tensor("COUNT", np.array([count], dtype=np.int32)),
                    ]
                )
            )
        return responses
