"""BLS into a decoupled model, cancelled after its first response: the iteration must still end."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            count = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            bls = pb_utils.InferenceRequest(
                model_name="repeat_decoupled",
                requested_output_names=["OUT"],
                inputs=[
                    pb_utils.Tensor("IN", np.arange(int(count[0]), dtype=np.int32)),
                    pb_utils.Tensor("DELAY", np.full(int(count[0]), 20, dtype=np.uint32)),
                ],
            )
            stream = bls.exec(decoupled=True)
            first = None
            for response in stream:
                if first is None and not response.has_error():
                    first = pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()
                    stream.cancel()
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("FIRST", first)]))
        return responses
