"""Answers every request with an error response (INVALID_ARG), not an exception."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                error=pb_utils.TritonError("bad thing", pb_utils.TritonError.INVALID_ARG)
            )
            for _ in requests
        ]
