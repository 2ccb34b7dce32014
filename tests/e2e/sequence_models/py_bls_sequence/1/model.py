"""A stateful BLS call: the request's correlation_id() and flags() go on to the sequence model py_accumulator."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="py_accumulator",
                requested_output_names=["OUTPUT"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT")],
                correlation_id=request.correlation_id(),
                flags=request.flags(),
            )
            answer = call.exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=answer.error()))
            else:
                output = pb_utils.get_output_tensor_by_name(answer, "OUTPUT")
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", output.as_numpy())]))
        return responses
