"""Answers every request with an error response, not an exception: INVALID_ARG, or, when INPUT0[0] is -(n + 1)
for a code n of the pb_utils.TritonError enum (0 UNKNOWN ... 7 CANCELLED), that code."""

import triton_python_backend_utils as pb_utils

CODES = [
    pb_utils.TritonError.UNKNOWN,
    pb_utils.TritonError.INTERNAL,
    pb_utils.TritonError.NOT_FOUND,
    pb_utils.TritonError.INVALID_ARG,
    pb_utils.TritonError.UNAVAILABLE,
    pb_utils.TritonError.UNSUPPORTED,
    pb_utils.TritonError.ALREADY_EXISTS,
    pb_utils.TritonError.CANCELLED,
]


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            first = float(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy().flat[0])
            n = -int(first) - 1
            code = CODES[n] if first.is_integer() and 0 <= n < len(CODES) else CODES[3]
            responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("bad thing", code)))
        return responses
