"""Business logic scripting: forwards INPUT0 and INPUT1 to the python model "add_sub" with a blocking exec()."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            infer_request = pb_utils.InferenceRequest(
                model_name="add_sub",
                requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                    pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                ],
            )
            infer_response = infer_request.exec()
            if infer_response.has_error():
                raise pb_utils.TritonModelException(infer_response.error().message())
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.get_output_tensor_by_name(infer_response, "OUTPUT0"),
                        pb_utils.get_output_tensor_by_name(infer_response, "OUTPUT1"),
                    ]
                )
            )
        return responses
