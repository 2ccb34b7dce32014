"""VERSION = the version of package `mhtestpkg` this model's environment has (the server's has none), and
PYTHON = the Python running the model."""

import sys

import mhtestpkg
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answers = [
            pb_utils.Tensor("VERSION", np.array([mhtestpkg.VERSION.encode()], dtype=np.object_)),
            pb_utils.Tensor("PYTHON", np.array([sys.executable.encode()], dtype=np.object_)),
        ]
        return [pb_utils.InferenceResponse(answers) for _ in requests]
