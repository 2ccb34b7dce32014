"""A model whose own is_ready() says no until it has served one request."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.served = False

    def is_ready(self):
        return self.served

    def execute(self, requests):
        self.served = True
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())
                ]
            )
            for r in requests
        ]
