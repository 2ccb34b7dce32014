"""Returns the sequence batcher's control tensors as outputs, shapes included (each is [1, 1] per request)."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for name in ("START", "END", "READY", "CORRID"):
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                outputs.append(pb_utils.Tensor(f"OUT_{name}", tensor.as_numpy()))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
