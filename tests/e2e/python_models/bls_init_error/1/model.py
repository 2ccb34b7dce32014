"""initialize() calls another model (BLS), which Triton allows only in execute (L0_backend_python bls_init_error)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        request = pb_utils.InferenceRequest(
            model_name="add_sub",
            inputs=[pb_utils.Tensor("INPUT0", np.ones(4, np.float32))],
            requested_output_names=["OUTPUT0"],
        )
        request.exec()

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[]) for _ in requests]
