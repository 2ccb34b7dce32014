"""OUTPUT0 = INPUT0 after HANG_S seconds (the optional input, default 0), in 50 ms steps that stop early with
a CANCELLED error response once the request is cancelled."""

import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            hang = pb_utils.get_input_tensor_by_name(request, "HANG_S")
            deadline = time.monotonic() + (float(hang.as_numpy()[0]) if hang is not None else 0.0)
            while time.monotonic() < deadline and not request.is_cancelled():
                time.sleep(0.05)
            if request.is_cancelled():
                error = pb_utils.TritonError("hangs: request cancelled", pb_utils.TritonError.CANCELLED)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", in_0)]))
        return responses
