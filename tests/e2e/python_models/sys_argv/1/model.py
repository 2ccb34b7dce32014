"""Answers sys.argv as the model sees it (Triton's BLS qa models run unittest.main(), which reads it)."""

import sys

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        argv = np.array([a.encode() for a in sys.argv], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("ARGV", argv)]) for _ in requests]
