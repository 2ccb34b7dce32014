"""BLS from processes the model forks (multiprocessing.Pool, as Triton's BLS qa model's test_multiprocess):
modelhost refuses it in the forked process with a clear error, which fails the request."""

from multiprocessing import get_context

import numpy as np
import triton_python_backend_utils as pb_utils


def _call(_):
    x = pb_utils.Tensor("INPUT0", np.ones((1, 4), np.float32))
    y = pb_utils.Tensor("INPUT1", np.ones((1, 4), np.float32))
    request = pb_utils.InferenceRequest(
        model_name="add_sub", requested_output_names=["OUTPUT0"], inputs=[x, y]
    )
    return request.exec().has_error()


class TritonPythonModel:
    def execute(self, requests):
        with get_context("fork").Pool(2) as pool:
            pool.map(_call, [1, 2])
        return [pb_utils.InferenceResponse([]) for _ in requests]
