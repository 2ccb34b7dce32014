"""OUTPUT0 = INPUT0, unless the optional input CRASH says to die: 1 -> os._exit(1), 9 -> SIGKILL to itself, 3 -> the
same after a second (so that other requests are sent to this stub meanwhile)."""

import os
import signal
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            crash = pb_utils.get_input_tensor_by_name(request, "CRASH")
            how = int(crash.as_numpy()[0]) if crash is not None else 0
            if how == 1:
                os._exit(1)
            if how == 3:
                time.sleep(1.0)
            if how in (3, 9):
                os.kill(os.getpid(), signal.SIGKILL)
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", in_0.as_numpy())])
            )
        return responses
