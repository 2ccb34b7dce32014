"""initialize() raises."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        raise pb_utils.TritonModelException("init_error: initialize fails on purpose")

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[]) for _ in requests]
