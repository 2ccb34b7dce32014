"""Async business logic scripting: `async def execute` awaits two concurrent async_exec() calls of "add_sub":
add_sub(INPUT0, INPUT1) gives OUTPUT0 = INPUT0 + INPUT1, add_sub(INPUT1, INPUT0) gives OUTPUT1 = INPUT1 - INPUT0."""

import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            straight = pb_utils.InferenceRequest(
                model_name="add_sub",
                requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.Tensor("INPUT0", in_0), pb_utils.Tensor("INPUT1", in_1)],
            )
            swapped = pb_utils.InferenceRequest(
                model_name="add_sub",
                requested_output_names=["OUTPUT1"],
                inputs=[pb_utils.Tensor("INPUT0", in_1), pb_utils.Tensor("INPUT1", in_0)],
            )
            sum_response, diff_response = await asyncio.gather(straight.async_exec(), swapped.async_exec())
            for infer_response in (sum_response, diff_response):
                if infer_response.has_error():
                    raise pb_utils.TritonModelException(infer_response.error().message())
            out_0 = pb_utils.get_output_tensor_by_name(sum_response, "OUTPUT0").as_numpy()
            out_1 = pb_utils.get_output_tensor_by_name(diff_response, "OUTPUT1").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT0", out_0), pb_utils.Tensor("OUTPUT1", out_1)]
                )
            )
        return responses
