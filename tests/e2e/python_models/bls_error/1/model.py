"""Business logic scripting errors: calls the model named by MODEL_NAME with add_sub's inputs ([1, 4] ones).
HAS_ERROR and MESSAGE report the BLS response's has_error() and error().message(). With the request parameter
"return_error": true, the model instead returns the BLS error itself as its response's error."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            model_name = (
                pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0].decode("utf-8")
            )
            ones = np.ones((1, 4), dtype=np.float32)
            infer_request = pb_utils.InferenceRequest(
                model_name=model_name,
                requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.Tensor("INPUT0", ones), pb_utils.Tensor("INPUT1", ones)],
            )
            infer_response = infer_request.exec()
            parameters = json.loads(request.parameters() or "{}")
            if infer_response.has_error() and parameters.get("return_error"):
                responses.append(pb_utils.InferenceResponse(error=infer_response.error()))
                continue
            message = infer_response.error().message() if infer_response.has_error() else ""
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("HAS_ERROR", np.array([infer_response.has_error()], dtype=np.bool_)),
                        pb_utils.Tensor("MESSAGE", np.array([message.encode("utf-8")], dtype=np.object_)),
                    ]
                )
            )
        return responses
