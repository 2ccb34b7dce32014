"""execute() raises for every request."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        raise pb_utils.TritonModelException("exec_error: execute fails on purpose")
