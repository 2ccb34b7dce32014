"""Business logic scripting across backends: OUTPUT0 = onnx_add(INPUT0) * 2, where "onnx_add" is an ONNX
model of the same server (OUTPUT0 = INPUT0 + 1, INT32 [batch, 4]; tests/e2e/models.py add_versioned_add)."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            infer_request = pb_utils.InferenceRequest(
                model_name="onnx_add",
                requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0")],
            )
            infer_response = infer_request.exec()
            if infer_response.has_error():
                raise pb_utils.TritonModelException(infer_response.error().message())
            out = pb_utils.get_output_tensor_by_name(infer_response, "OUTPUT0").as_numpy() * 2
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", out)]))
        return responses
